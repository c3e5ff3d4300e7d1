package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Mode is the mode the call that filled an entry was in.
type Mode uint8

const (
	// ModeJSON: the entry holds one JSON body.
	ModeJSON Mode = 1
	// ModeStream: the entry holds SSE chunks.
	ModeStream Mode = 2
)

func (m Mode) String() string {
	switch m {
	case ModeJSON:
		return "json"
	case ModeStream:
		return "stream"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Usage is the filling call's usage, in tokens, for the audit's
// cache_saved_tokens (the fields of call.Outcome).
type Usage struct {
	InputTokens, OutputTokens         int64
	CacheReadTokens, CacheWriteTokens int64
}

// Entry is one stored answer. Entries are immutable once stored: stores
// hand out the stored value, which the caller must not modify.
type Entry struct {
	// Key is where the entry is stored; a store returns an entry only for
	// this exact key, its partition included.
	Key StoreKey
	// Mode is how Body or Chunks were filled.
	Mode Mode
	// Body is the answer's JSON body (ModeJSON).
	Body []byte
	// Chunks are the data payloads of the answer's SSE events, as stored,
	// without "data: " and without [DONE] (ModeStream).
	Chunks [][]byte
	// Model is the model the answer named.
	Model string
	// FinishReason is the answer's finish_reason (stop, or length with
	// store_length).
	FinishReason string
	// Usage is the filling call's usage.
	Usage Usage
	// Stored is when the entry was stored.
	Stored time.Time
	// Expires is when it stops answering (Stored plus the policy's ttl);
	// zero when unknown (an entry of encoding version 1). A store that
	// copies an entry into another (memory in front of Redis) keeps it
	// only until then.
	Expires time.Time
}

// entryOverhead approximates, in bytes, what an entry costs beyond its
// variable fields (struct, slice headers, store bookkeeping).
const entryOverhead = 256

// Size is the entry's cost in bytes, as stores count it against
// max_bytes: its body, chunks, model and finish reason, plus a fixed
// overhead (256 B, and 24 B a chunk).
func (e *Entry) Size() int64 {
	n := int64(entryOverhead + len(e.Body) + len(e.Model) + len(e.FinishReason))
	for _, c := range e.Chunks {
		n += int64(24 + len(c))
	}
	return n
}

// ErrCorrupt is returned (wrapped) by [Unmarshal] for bytes that are not an
// entry of a known version.
var ErrCorrupt = errors.New("cache: corrupt entry")

// The first byte of each encoding: version 2 adds the expiry.
const (
	encodingV1 = 1
	encodingV2 = 2
)

// Marshal appends the versioned encoding of e to b, version 2:
//
//	version 2 (1 byte) | store key (64) | mode (1) | stored, Unix ns (varint)
//	| expires, Unix ns (varint; 0 unknown)
//	| model, finish reason (uvarint length, bytes)
//	| usage: input, output, cache read, cache write (4 uvarints)
//	| body (uvarint length, bytes) | chunk count (uvarint), each (length, bytes)
//
// Version 1, which [Unmarshal] still reads, is the same without the
// expiry.
func Marshal(b []byte, e *Entry) []byte {
	b = append(b, encodingV2)
	b = append(b, e.Key[:]...)
	b = append(b, byte(e.Mode))
	b = binary.AppendVarint(b, e.Stored.UnixNano())
	var exp int64
	if !e.Expires.IsZero() {
		exp = e.Expires.UnixNano()
	}
	b = binary.AppendVarint(b, exp)
	b = appendBytes(b, []byte(e.Model))
	b = appendBytes(b, []byte(e.FinishReason))
	for _, v := range [...]int64{e.Usage.InputTokens, e.Usage.OutputTokens, e.Usage.CacheReadTokens, e.Usage.CacheWriteTokens} {
		b = binary.AppendUvarint(b, uint64(max(v, 0)))
	}
	b = appendBytes(b, e.Body)
	b = binary.AppendUvarint(b, uint64(len(e.Chunks)))
	for _, c := range e.Chunks {
		b = appendBytes(b, c)
	}
	return b
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Unmarshal decodes an entry written by [Marshal] (version 2, or version
// 1 with Expires zero). The entry's byte fields are copies (b may be
// reused). Anything else (another version, a short or long value, a bad
// mode) is an error wrapping [ErrCorrupt].
func Unmarshal(b []byte) (*Entry, error) {
	d := decoder{b: b}
	v := d.byte()
	if v != encodingV1 && v != encodingV2 {
		return nil, fmt.Errorf("%w: version %d", ErrCorrupt, v)
	}
	e := &Entry{}
	copy(e.Key[:], d.n(64))
	e.Mode = Mode(d.byte())
	e.Stored = time.Unix(0, d.varint())
	if v == encodingV2 {
		if exp := d.varint(); exp != 0 {
			e.Expires = time.Unix(0, exp)
		}
	}
	e.Model = string(d.bytes())
	e.FinishReason = string(d.bytes())
	for _, p := range [...]*int64{&e.Usage.InputTokens, &e.Usage.OutputTokens, &e.Usage.CacheReadTokens, &e.Usage.CacheWriteTokens} {
		*p = int64(d.uvarint())
	}
	if body := d.bytes(); len(body) > 0 {
		e.Body = append([]byte(nil), body...)
	}
	nc := d.uvarint()
	if nc > uint64(len(b)) {
		d.fail("chunk count")
	}
	if nc > 0 && d.err == nil {
		e.Chunks = make([][]byte, 0, nc)
		for i := uint64(0); i < nc && d.err == nil; i++ {
			e.Chunks = append(e.Chunks, append([]byte(nil), d.bytes()...))
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err == nil && e.Mode != ModeJSON && e.Mode != ModeStream {
		d.fail("mode")
	}
	if d.err != nil {
		return nil, d.err
	}
	return e, nil
}

// decoder reads an encoding, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
	d.b = nil
}

func (d *decoder) n(n int) []byte {
	if d.err != nil || len(d.b) < n {
		d.fail("short value")
		return nil
	}
	s := d.b[:n]
	d.b = d.b[n:]
	return s
}

func (d *decoder) byte() byte {
	if s := d.n(1); s != nil {
		return s[0]
	}
	return 0
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > 1<<62 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("short value")
		return nil
	}
	return d.n(int(n))
}
