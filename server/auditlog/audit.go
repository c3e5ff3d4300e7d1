// Package auditlog writes Flexway's audit log: one JSON line per inference
// call (DESIGN.md, "Audit and telemetry"), metadata only — never a prompt,
// a response, an image, a header value or a secret. Identifiers (the API
// key's name, the OpenAI `user` field) are written as HMAC-SHA256 under
// audit.hash_key.
//
// Lines are written off the call's path: [Writer.Write] encodes the line
// and queues it; one goroutine writes queued lines in batches (one write
// per batch, at most every [flushEvery]), to a file rotated by size
// (gopkg.in/natefinch/lumberjack.v2) or to stdout. Nothing is synced per
// call. No accepted line is lost: [Writer.Close] writes every queued line,
// and a batch that cannot be written is kept and retried. The file holds
// whole lines only: a line cut short by a failed write (a full disk) is
// finished by the retry, and one an earlier process could not finish is
// removed from the end of the file when [Open] opens it again. While the
// audit cannot be written, [Writer.Healthy] reports why, so that new
// inference calls are refused (503) rather than served unaudited.
package auditlog

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/natefinch/lumberjack.v2"
)

// Line is one audit line. JSON names are DESIGN.md's.
//
// Lines are encoded by appendLine (encode.go), not by reflection: a field
// added, removed, renamed or reordered here must be so there too
// (TestAppendLineKnowsEveryField fails until it is). The json tags stay
// the reference: appendLine writes what encoding/json would (HTML escaping
// off), and `flexway report` reads the lines with encoding/json.
type Line struct {
	// Time is when the call started, UTC.
	Time time.Time `json:"time"`
	// RequestID is the call's X-Request-Id.
	RequestID string `json:"request_id"`
	// Operation is ai.chatCompletions, ai.embeddings, or the full gRPC
	// method of a specialised model.
	Operation string `json:"operation"`
	// Tenant and Agent are the caller's, as declared in the configuration.
	Tenant string `json:"tenant"`
	Agent  string `json:"agent"`
	// Backend served the call (or failed last).
	Backend string `json:"backend"`
	// ModelRequested and ModelServed are the caller's model and the
	// upstream's.
	ModelRequested string `json:"model_requested"`
	ModelServed    string `json:"model_served"`
	// Capability is chat, vision, embeddings or grpc.
	Capability string `json:"capability"`
	// Feature is a specialised model's (flexway.v1.operation).ai.feature.
	Feature string `json:"feature,omitempty"`
	// Alias is the alias (ai.aliases) the call was routed by and Arm the
	// arm of the target that served (its arm name, else its index); both
	// absent for a call that named no alias. Configuration names only.
	Alias string `json:"alias,omitempty"`
	Arm   string `json:"arm,omitempty"`
	// WouldDeny is the refusal a shadow policy (ai.policies,
	// governance.mode shadow) would have made of the call, which went on:
	// written as {"policy": ..., "reason": ...} only when one would have.
	WouldDeny WouldDeny `json:"would_deny,omitzero"`
	// Guardrails are the guardrail rules that matched the call, one per
	// policy, rule type, phase and action, in the order found: written as
	// [{"policy": ..., "rule": ..., "phase": ..., "action": ...}] only
	// when some rule matched. Configuration names only: never the
	// matched text or the entity's value.
	Guardrails []Guardrail `json:"guardrails,omitempty"`
	// InputTokens and OutputTokens are the usage committed, in tokens.
	// InputTokens counts every input token, cached ones included.
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CacheReadTokens and CacheWriteTokens say how many of InputTokens the
	// provider read from and wrote to its prompt cache (the usage's
	// prompt_tokens_details.cached_tokens and cache_creation_input_tokens),
	// charged at the backend's cache_read and cache_write prices. Written
	// always, as the other token counts: 0 is "none cached".
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	// Cache is the response cache's verdict on the call (hit, miss or
	// bypass), written only for a call a policy's cache section selected.
	Cache string `json:"cache,omitempty"`
	// CacheSavedTokens is, for a cache hit, the input plus output tokens
	// of the call that filled the entry (what the hit did not spend);
	// written only when positive.
	CacheSavedTokens int64 `json:"cache_saved_tokens,omitempty"`
	// CostEUR is the cost committed, a decimal string exact to the
	// nano-euro ("0.000024000"); see [money.FormatEURFixed].
	CostEUR string `json:"cost_eur"`
	// CostNanoEUR is the same in nano-euros, for metrics; not written.
	CostNanoEUR int64 `json:"-"`
	// UsageEstimated is set when the usage was estimated (a cut stream).
	UsageEstimated bool `json:"usage_estimated"`
	// UsageOverReservation is set, and only then written, when the usage
	// the upstream reported is more tokens than the call reserved: the
	// upstream did not honour the output limit (or the call set none and
	// used more than ai.budget.reserve_output_tokens).
	UsageOverReservation bool `json:"usage_over_reservation,omitempty"`
	// MeteredBy is local, or upstream for a relay whose peer meters.
	MeteredBy string `json:"metered_by"`
	// Outcome is ok, refused, upstream_error, canceled or error.
	Outcome string `json:"outcome"`
	// Status is the HTTP status of the answer (its equivalent for gRPC).
	Status int `json:"status"`
	// Fallback is set when a fallback backend served.
	Fallback bool `json:"fallback"`
	// Soft is set when the caller was past a soft cap.
	Soft bool `json:"soft"`
	// DurationMS is the call's duration in milliseconds.
	DurationMS float64 `json:"duration_ms"`
	// KeyHash is the HMAC of the API key's name (never the key).
	KeyHash string `json:"key_hash"`
	// UserHash is the HMAC of the OpenAI user field, "" when absent.
	UserHash string `json:"user_hash"`
}

// WouldDeny names a shadow policy's would-be refusal of a call: the
// policy's name and the reason it would have refused with
// (model_not_allowed or backend_not_allowed). Configuration names only.
type WouldDeny struct {
	Policy string `json:"policy"`
	Reason string `json:"reason"`
}

// Guardrail is one guardrail verdict of a call: the policy, the rule's
// type (pii, secrets, injection, banned, regex, json_schema, webhook),
// the phase (prompt, response) and the action (deny, redact, log, or
// would_deny / would_redact for a shadow policy's rule).
type Guardrail struct {
	Policy string `json:"policy"`
	Rule   string `json:"rule"`
	Phase  string `json:"phase"`
	Action string `json:"action"`
}

// ErrUnavailable is wrapped by [Writer.Write] and [Writer.Healthy] while
// the audit cannot be written.
var ErrUnavailable = errors.New("the audit log cannot be written")

// Options configures a [Writer].
type Options struct {
	// MaxSizeMB is the size, in megabytes, at which the file is rotated
	// (default 100); MaxBackups rotated files are kept (default 10).
	MaxSizeMB, MaxBackups int
	// Logger receives a line when writing fails and when it works again;
	// nil discards.
	Logger *slog.Logger
	// OnFailure, when set, is told each time a batch cannot be written,
	// with the reason (for a metric).
	OnFailure func(reason string)
}

// flushEvery bounds how long an accepted line waits before it is written.
const flushEvery = 10 * time.Millisecond

// maxEncodeBuffer is the largest encoding buffer run keeps for the next
// batch: 1 MiB.
const maxEncodeBuffer = 1 << 20

// retryEvery is how often a batch that could not be written is retried.
const retryEvery = time.Second

// Writer is the audit log; safe for concurrent use.
type Writer struct {
	out       io.Writer
	file      *lumberjack.Logger // nil for stdout
	written   os.FileInfo        // the file the last batch went to; run's goroutine only
	path      string
	key       []byte
	hmacs     sync.Pool    // of *hasher under key
	names     sync.Map     // name → Hash(name); see HashName
	nameCount atomic.Int64 // names stored or refused
	log       *slog.Logger
	onFail    func(string)

	// cut is how many bytes of pending's first line a short write put in
	// the file: the retry writes the rest of it. repair is set when writing
	// starts over on a file after such a cut: the line is then written
	// whole, after the end of the file is repaired. run's goroutine only.
	cut    int
	repair bool

	mu      sync.Mutex
	queued  []*Line      // accepted lines not yet encoded
	pending bytes.Buffer // encoded lines not yet written whole (see cut)
	spare   []*Line      // the last batch's slice, reused for queued; never queued's array
	enc     []byte       // run's: the encoding buffer
	failed  error        // the last write's error, nil when healthy
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

// Open opens the audit log at path ("-" is stdout; the directory is
// created) with the HMAC key of its identifiers, and starts its writer.
func Open(path string, hashKey []byte, o Options) (*Writer, error) {
	w := &Writer{path: path, key: hashKey, log: o.Logger, onFail: o.OnFailure, wake: make(chan struct{}, 1), done: make(chan struct{})}
	w.hmacs.New = func() any { return &hasher{mac: hmac.New(sha256.New, w.key)} }
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if path == "-" {
		w.out = os.Stdout
	} else {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, fmt.Errorf("audit.path: %w", err)
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
		if err != nil {
			return nil, fmt.Errorf("audit.path: %w", err)
		}
		f.Close()
		// An earlier process may have stopped after a short write (a full
		// disk): the line it cut short is removed before anything is
		// appended after it.
		if err := w.repairTail(); err != nil {
			return nil, fmt.Errorf("audit.path: %w", err)
		}
		size, backups := o.MaxSizeMB, o.MaxBackups
		if size <= 0 {
			size = 100
		}
		if backups <= 0 {
			backups = 10
		}
		w.file = &lumberjack.Logger{Filename: path, MaxSize: size, MaxBackups: backups}
		w.out = w.file
	}
	go w.run()
	return w, nil
}

// Hash returns the hex HMAC-SHA256 of s under the hash key; "" for "".
func (w *Writer) Hash(s string) string {
	if s == "" {
		return ""
	}
	h := w.hmacs.Get().(*hasher)
	h.in = append(h.in[:0], s...)
	h.mac.Write(h.in)
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], h.mac.Sum(h.sum[:0]))
	h.mac.Reset() // back to the keyed state
	if cap(h.in) <= maxHasherInput {
		w.hmacs.Put(h)
	}
	return string(out[:])
}

// HashName is [Writer.Hash] for the configuration's names (API key and
// relay names): their hashes are kept, up to maxNameHashes of them, so that
// the line of a call does not compute its key's HMAC again.
func (w *Writer) HashName(s string) string {
	if h, ok := w.names.Load(s); ok {
		return h.(string)
	}
	h := w.Hash(s)
	if w.nameCount.Add(1) <= maxNameHashes {
		w.names.Store(s, h)
	}
	return h
}

// maxNameHashes bounds HashName's memory: 4,096 names (about 600 KiB).
const maxNameHashes = 4096

// hasher is a reusable HMAC-SHA256 with its buffers, pooled by a [Writer]
// so that [Writer.Hash] allocates only the string it returns.
type hasher struct {
	mac hash.Hash // hmac.New(sha256.New, key), reset after each use
	in  []byte    // the input, copied: a string cannot be written to a hash.Hash without a copy
	sum [sha256.Size]byte
}

// maxHasherInput is the largest input buffer a pooled hasher keeps.
const maxHasherInput = 4 << 10

// Healthy returns nil while the audit can be written, else an error
// wrapping [ErrUnavailable] that says why.
func (w *Writer) Healthy() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("%w: closed", ErrUnavailable)
	}
	if w.failed != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, w.failed)
	}
	return nil
}

// Write queues l; it is encoded and written, off the caller's path, within
// flushEvery. l must not be changed afterwards. It fails, wrapping
// [ErrUnavailable], after Close, and with encoding/json's error for a line
// JSON cannot hold (a NaN duration, a year past 9999); while writes fail
// the line is still accepted and kept (a call already served must be
// audited).
func (w *Writer) Write(l *Line) error {
	if l == nil {
		return errors.New("audit: nil line")
	}
	if err := encodeError(l); err != nil {
		return err
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return fmt.Errorf("%w: closed", ErrUnavailable)
	}
	// Only the first line after a flush wakes the writer: the lines that
	// follow within flushEvery join its batch, and run looks again after
	// each write, so a busy gateway wakes it once per batch, not per call.
	first := len(w.queued) == 0
	w.queued = append(w.queued, l)
	w.mu.Unlock()
	if first {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// run writes pending lines in batches until Close.
func (w *Writer) run() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		w.mu.Lock()
		closed := w.closed
		w.mu.Unlock()
		if !w.flush() && !closed {
			// Failing: retry later, whatever arrives.
			time.Sleep(retryEvery)
			continue
		}
		if closed {
			return
		}
		w.mu.Lock()
		more := len(w.queued) > 0 // queued while the batch was written: no wake came
		w.mu.Unlock()
		if !more {
			<-w.wake
		}
		// Gather what else comes within flushEvery into one write.
		timer.Reset(flushEvery)
		<-timer.C
	}
}

// flush encodes the queued lines and writes every pending line in one
// write; it reports success. Only run calls it.
func (w *Writer) flush() bool {
	w.mu.Lock()
	lines := w.queued
	if len(lines) > 0 {
		// The queue and the spare batch are always two arrays: they are
		// swapped only when there is a batch to take, so that a flush that
		// finds nothing queued never leaves them sharing one (which made
		// Write append into the batch being encoded).
		w.queued, w.spare = w.spare[:0], nil
	}
	w.mu.Unlock()
	if len(lines) > 0 {
		buf := w.enc[:0]
		for _, l := range lines {
			buf = appendLine(buf, l)
			buf = append(buf, '\n')
		}
		clear(lines) // the lines are the collector's again
		w.mu.Lock()
		w.spare = lines
		w.pending.Write(buf)
		w.mu.Unlock()
		if cap(buf) <= maxEncodeBuffer {
			w.enc = buf
		}
	}
	w.mu.Lock()
	if w.pending.Len() == 0 {
		w.mu.Unlock()
		return true
	}
	batch := bytes.Clone(w.pending.Bytes())
	w.mu.Unlock()

	err := w.checkFile()
	n := 0
	if err == nil {
		n, err = w.write(batch[w.cut:])
		if err == nil {
			w.remember()
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// What a short write (a full disk) put in the file is not written
	// again: the retry goes on from there, so the file holds whole lines,
	// once each. The line cut short stays pending, with cut saying how much
	// of it is in the file, in case writing starts over on another file.
	end := w.cut + n
	whole := bytes.LastIndexByte(batch[:end], '\n') + 1
	w.pending.Next(whole)
	w.cut = end - whole
	if err != nil {
		if w.failed == nil {
			w.log.Error("audit log cannot be written: inference calls are refused until it can", "path", w.path, "error", err.Error())
		}
		w.failed = err
		if w.onFail != nil {
			w.onFail(err.Error())
		}
		return false
	}
	if w.failed != nil {
		w.log.Warn("audit log written again: inference calls are served", "path", w.path)
		w.failed = nil
	}
	return true
}

// write writes p, the rest of pending from cut on, to the audit.
func (w *Writer) write(p []byte) (int, error) {
	if w.cut == 0 {
		return w.out.Write(p)
	}
	// The rest of the line cut short goes alone: it fits in the file the
	// line started in, whereas with the lines after it lumberjack could
	// rotate first, and the line would be split across two files.
	i := bytes.IndexByte(p, '\n') + 1
	n, err := w.out.Write(p[:i])
	if err != nil || i == len(p) {
		return n, err
	}
	m, err := w.out.Write(p[i:])
	return n + m, err
}

// checkFile makes sure the next write reaches the file at the path: when
// the file was removed (by hand, or its directory) a new one is started;
// when the path now names another file, writing switches to it; when it
// names no regular file (a directory put in its place), writing fails,
// since lines written to the old, unlinked file would be lost. When
// writing starts over on a file in the middle of a line cut short, the
// line is written whole to the new file, after the end of that file is
// repaired.
func (w *Writer) checkFile() error {
	if w.file == nil {
		return nil
	}
	st, err := os.Stat(w.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if w.written != nil {
			w.log.Warn("audit file was removed: starting a new one", "path", w.path)
		}
		w.startOver()
		w.repair = false // lumberjack starts the new file empty
		return os.MkdirAll(filepath.Dir(w.path), 0o750)
	case err != nil:
		return err
	case !st.Mode().IsRegular():
		w.startOver()
		return fmt.Errorf("%s is not a regular file", w.path)
	case w.written != nil && !os.SameFile(st, w.written):
		w.log.Warn("audit file was replaced: writing to the new one", "path", w.path)
		w.startOver()
	}
	if w.repair {
		if err := w.repairTail(); err != nil {
			return err
		}
		w.repair = false
	}
	return nil
}

// startOver closes the file: the next write opens the one at the path. A
// line cut short in the old file is written whole to the new one.
func (w *Writer) startOver() {
	_ = w.file.Close()
	w.written = nil
	if w.cut > 0 {
		w.cut = 0
		w.repair = true
	}
}

// repairTail removes an incomplete last line from the file at the path,
// what a write cut short (a full disk) leaves when the process stops, or
// starts over on a file, before it could finish the line: lines appended
// after it would be joined to it, and the file could no longer be read
// line by line. A file that does not exist, is empty, is no regular file
// or ends with a newline is left as it is. Only the number of bytes
// removed is logged, never the bytes.
func (w *Writer) repairTail() error {
	if st, err := os.Stat(w.path); err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		return nil // nothing to repair; a file that cannot be read fails where it is written
	}
	f, err := os.OpenFile(w.path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrPermission) {
		// Writable, not readable: its end cannot be checked.
		w.log.Warn("audit file cannot be read: an incomplete line at its end, left by an earlier failed write, would stay", "path", w.path)
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	// Back from the end to the last newline, a block at a time.
	var buf [32 << 10]byte
	keep := int64(0)
	for end := size; end > 0; {
		start := max(end-int64(len(buf)), 0)
		b := buf[:end-start]
		if _, err := f.ReadAt(b, start); err != nil {
			return fmt.Errorf("reading the end of %s: %w", w.path, err)
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			keep = start + int64(i) + 1
			break
		}
		end = start
	}
	if keep == size {
		return nil
	}
	if err := f.Truncate(keep); err != nil {
		return fmt.Errorf("removing an incomplete line at the end of %s: %w", w.path, err)
	}
	w.log.Warn("audit file ended with an incomplete line, left by an earlier failed write: removed it",
		"path", w.path, "bytes_removed", size-keep)
	return nil
}

// remember notes which file the last batch went to.
func (w *Writer) remember() {
	if w.file == nil {
		return
	}
	if st, err := os.Stat(w.path); err == nil {
		w.written = st
	}
}

// Close writes every accepted line and stops the writer. Lines that
// still cannot be written are reported in the error.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	<-w.done
	w.mu.Lock()
	left := w.pending.Len() - w.cut // run's last flush encoded every queued line
	w.mu.Unlock()
	var err error
	if left > 0 {
		err = fmt.Errorf("audit: %d bytes of lines could not be written to %s", left, w.path)
	}
	if w.file != nil {
		if cerr := w.file.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
