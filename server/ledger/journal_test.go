package ledger

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
)

// testRecords are records of every shape: empty, long and odd bucket ids,
// negative, zero and extreme deltas, many lines.
func testRecords() []jrecord {
	many := make([]jdelta, 40)
	for i := range many {
		many[i] = jdelta{bucket: fmt.Sprintf("t:tenant-%d:tokens_per_day:2026-11-30", i), delta: int64(i) * 1_000_003}
	}
	return []jrecord{
		{seq: 1, deltas: []jdelta{{bucket: "t:acme:tokens_per_day:2026-11-30", delta: 700}, {bucket: "t:acme:eur_per_month:2026-11", delta: 550_000}}},
		{seq: 2, deltas: []jdelta{}},
		{seq: 3, deltas: []jdelta{{bucket: "", delta: -5}, {bucket: strings.Repeat("x", 300), delta: 0}}},
		{seq: 1 << 40, deltas: []jdelta{{bucket: "a:b%3Ac:d:tokens_per_month:2026-11", delta: math.MaxInt64}, {bucket: "m", delta: math.MinInt64}}},
		{seq: 1<<40 + 1, deltas: many},
		{seq: math.MaxUint64, deltas: []jdelta{{bucket: "\x00\xff", delta: 1}}},
		// With notes: an audit line, and 1,000 zeros.
		{seq: 7, deltas: []jdelta{{bucket: "t:acme:tokens_per_day:2026-11-30", delta: 15}}, note: []byte(`{"time":"2026-11-30T19:40:00Z","tenant":"acme"}`)},
		{seq: 8, deltas: []jdelta{}, note: bytes.Repeat([]byte{0}, 1000)},
	}
}

// encodeRecords returns the journal of recs and the end offset of each.
func encodeRecords(recs []jrecord) ([]byte, []int64) {
	var b []byte
	ends := make([]int64, len(recs))
	for i, r := range recs {
		b = appendRecord(b, r.seq, r.deltas, r.note)
		ends[i] = int64(len(b))
	}
	return b, ends
}

func readAll(data []byte) (recs []jrecord, good int64, clean bool, err error) {
	jr := newJournalReader(bytes.NewReader(data))
	for {
		r, ok := jr.next()
		if !ok {
			break
		}
		recs = append(recs, r)
	}
	good, clean = jr.end()
	return recs, good, clean, jr.err
}

func sameRecords(a, b []jrecord) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].seq != b[i].seq || len(a[i].deltas) != len(b[i].deltas) || !bytes.Equal(a[i].note, b[i].note) {
			return false
		}
		for j := range a[i].deltas {
			if a[i].deltas[j] != b[i].deltas[j] {
				return false
			}
		}
	}
	return true
}

func TestJournalRecordRoundTrip(t *testing.T) {
	want := testRecords()
	data, ends := encodeRecords(want)
	got, good, clean, err := readAll(data)
	if err != nil {
		t.Fatal(err)
	}
	if !sameRecords(got, want) {
		t.Errorf("read back:\n got %+v\nwant %+v", got, want)
	}
	if good != int64(len(data)) || !clean {
		t.Errorf("end: good %d clean %v, want %d true", good, clean, len(data))
	}
	// Each record alone: the length prefix and CRC frame exactly it.
	start := int64(0)
	for i, r := range want {
		one := appendRecord(nil, r.seq, r.deltas, r.note)
		if !bytes.Equal(one, data[start:ends[i]]) {
			t.Errorf("record %d encodes differently alone", i)
		}
		start = ends[i]
	}
	// appendRecord appends.
	if b := appendRecord([]byte("prefix"), 9, nil, nil); !bytes.HasPrefix(b, []byte("prefix")) {
		t.Errorf("appendRecord lost dst: %q", b)
	}
	if got, good, clean, _ := readAll(nil); len(got) != 0 || good != 0 || !clean {
		t.Errorf("empty journal: %d records, good %d, clean %v", len(got), good, clean)
	}
}

// TestJournalReaderTornTail cuts a journal at every offset: the records
// complete before the cut are returned, and the good end is the end of the
// last of them.
func TestJournalReaderTornTail(t *testing.T) {
	recs := testRecords()
	data, ends := encodeRecords(recs)
	for cut := 0; cut <= len(data); cut++ {
		n := 0 // records complete before cut
		var wantGood int64
		for n < len(ends) && ends[n] <= int64(cut) {
			wantGood = ends[n]
			n++
		}
		got, good, clean, err := readAll(data[:cut])
		if err != nil {
			t.Fatal(err)
		}
		if !sameRecords(got, recs[:n]) || good != wantGood || clean != (wantGood == int64(cut)) {
			t.Fatalf("cut at %d: %d records, good %d, clean %v; want %d records, good %d", cut, len(got), good, clean, n, wantGood)
		}
	}
	// What an OS crash may leave after the last record: zeros.
	got, good, clean, _ := readAll(append(bytes.Clone(data), make([]byte, 4096)...))
	if !sameRecords(got, recs) || good != int64(len(data)) || clean {
		t.Errorf("zeros after the journal: %d records, good %d, clean %v", len(got), good, clean)
	}
}

// TestJournalReaderCorrupt flips each byte of a journal in turn: reading
// stops before the record holding it (its CRC no longer matches).
func TestJournalReaderCorrupt(t *testing.T) {
	recs := testRecords()
	data, ends := encodeRecords(recs)
	for _, mask := range []byte{0x01, 0x80, 0xff} {
		for i := range data {
			bad := bytes.Clone(data)
			bad[i] ^= mask
			n := 0 // the record holding byte i
			for ends[n] <= int64(i) {
				n++
			}
			var wantGood int64
			if n > 0 {
				wantGood = ends[n-1]
			}
			got, good, clean, err := readAll(bad)
			if err != nil {
				t.Fatal(err)
			}
			if !sameRecords(got, recs[:n]) || good != wantGood || clean {
				t.Fatalf("byte %d ^ %#x: %d records, good %d, clean %v; want %d records, good %d", i, mask, len(got), good, clean, n, wantGood)
			}
		}
	}
}

func TestJournalFileNames(t *testing.T) {
	if got := journalName("/d/ledger.db", 0x1f); got != "/d/ledger.db.journal.000000000000001f" {
		t.Errorf("journalName: %s", got)
	}
	dir := t.TempDir()
	path := dir + "/ledger.db"
	for _, name := range []string{
		"ledger.db.journal.0000000000000003", "ledger.db.journal.0000000000000001", "ledger.db.journal.00000000000000a0",
		"ledger.db.journal.0000000000000002.tmp", "ledger.db.journal.2", "ledger.db.journal.000000000000000A", "other.db.journal.0000000000000004",
	} {
		if err := os.WriteFile(dir+"/"+name, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ks, err := journalFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ks) != "[1 3 160]" {
		t.Errorf("journalFiles: %v, want [1 3 160]", ks)
	}
}
