package cache_test

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/flexway/flexway/server/cache"
)

func sampleEntry() *cache.Entry {
	return &cache.Entry{
		Key:          cache.MakeStoreKey(cache.Partition{Tenant: "acme"}.ID(), cache.Key{7}),
		Mode:         cache.ModeStream,
		Chunks:       [][]byte{[]byte(`{"choices":[{"delta":{"content":"Hel"}}]}`), []byte(`{"choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}`)},
		Model:        "m1-2026",
		FinishReason: "stop",
		Usage:        cache.Usage{InputTokens: 12, OutputTokens: 2, CacheReadTokens: 4},
		Stored:       time.Unix(1764672000, 123456789),
	}
}

func TestEntryRoundTrip(t *testing.T) {
	t.Parallel()
	for _, e := range []*cache.Entry{
		sampleEntry(),
		{Key: cache.StoreKey{1}, Mode: cache.ModeJSON, Body: []byte(`{"id":"x","choices":[]}`), Model: "m", FinishReason: "length", Stored: time.Unix(0, 1), Expires: time.Unix(3600, 1)},
	} {
		b := cache.Marshal(nil, e)
		got, err := cache.Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, e)
		}
	}
}

// TestEntryEncodingPinned pins the version 2 bytes of an entry, and that
// version 1 bytes (which Redis may still hold) decode with no expiry: a
// change needs a new version, since Redis holds old values.
func TestEntryEncodingPinned(t *testing.T) {
	t.Parallel()
	e := &cache.Entry{Key: cache.StoreKey{0xab}, Mode: cache.ModeJSON, Body: []byte(`{}`), Model: "m", FinishReason: "stop",
		Usage: cache.Usage{InputTokens: 300, OutputTokens: 1}, Stored: time.Unix(0, 5), Expires: time.Unix(0, 9)}
	want := append(append([]byte{2, 0xab}, make([]byte, 63)...), 1, 10, 18, 1, 'm', 4, 's', 't', 'o', 'p', 0xac, 0x02, 1, 0, 0, 2, '{', '}', 0)
	if got := cache.Marshal(nil, e); !bytes.Equal(got, want) {
		t.Errorf("Marshal =\n%x\nwant\n%x", got, want)
	}
	v1 := append(append([]byte{1, 0xab}, make([]byte, 63)...), 1, 10, 1, 'm', 4, 's', 't', 'o', 'p', 0xac, 0x02, 1, 0, 0, 2, '{', '}', 0)
	got, err := cache.Unmarshal(v1)
	old := *e
	old.Expires = time.Time{}
	if err != nil || !reflect.DeepEqual(got, &old) {
		t.Errorf("Unmarshal(version 1) = %+v, %v; want %+v", got, err, &old)
	}
}

func TestEntryCorrupt(t *testing.T) {
	t.Parallel()
	good := cache.Marshal(nil, sampleEntry())
	bad := [][]byte{
		nil, {}, {2}, {0}, good[:len(good)-1], append(append([]byte{}, good...), 0), good[:65],
		append([]byte{1}, bytes.Repeat([]byte{0xff}, 100)...),
		[]byte("not an entry at all, a string someone SET"),
	}
	// A bad mode.
	m := append([]byte{}, good...)
	m[65] = 9 // the mode byte
	bad = append(bad, m)
	for _, b := range bad {
		if _, err := cache.Unmarshal(b); !errors.Is(err, cache.ErrCorrupt) {
			t.Errorf("Unmarshal(%q) error = %v, want ErrCorrupt", b, err)
		}
	}
}

func TestEntrySize(t *testing.T) {
	t.Parallel()
	e := sampleEntry()
	want := int64(256 + len("m1-2026") + len("stop") + 24 + len(e.Chunks[0]) + 24 + len(e.Chunks[1]))
	if got := e.Size(); got != want {
		t.Errorf("Size = %d, want %d", got, want)
	}
}
