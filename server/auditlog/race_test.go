package auditlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/flexway/flexway/server/money"
)

// soak reports whether the long versions of tests run (FLEXWAY_SOAK=1,
// `make soak`).
func soak() bool { return os.Getenv("FLEXWAY_SOAK") == "1" }

// TestConcurrentWritesEachLineOnce is issue 12's race test: 4 goroutines
// write 1,500 lines each (15,000 under FLEXWAY_SOAK=1) at random gaps,
// some longer than flushEvery so that the writer often finds its queue
// empty, and every line must reach the file exactly once, none of them
// `null`. Before the fix, a flush that found the queue empty left the
// queue and the spare batch on one array: lines were lost, others written
// twice or as `null`, and `go test -race` reported the race between Write
// and flush.
func TestConcurrentWritesEachLineOnce(t *testing.T) {
	const writers = 4
	perWriter := 1500
	if soak() {
		perWriter = 15000
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := Open(path, []byte("k"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Every round of writes ends with a pause of every writer longer than
	// flushEvery: the writer then flushes with nothing queued, the case
	// that left the queue and the spare batch on one array.
	const round = 50
	var bar barrier
	bar.init(writers)
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 12))
			for i := range perWriter {
				if err := w.Write(&Line{Time: time.Unix(1, 0).UTC(), RequestID: fmt.Sprintf("g%d-%d", g, i), CostEUR: money.FormatEURFixed(1), MeteredBy: "local"}); err != nil {
					t.Error(err)
				}
				switch {
				case i%round == round-1:
					bar.wait()
					time.Sleep(flushEvery + time.Duration(2000+r.IntN(8000))*time.Microsecond)
				case r.IntN(8) == 0:
					time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
				case r.IntN(2) == 0:
					time.Sleep(time.Duration(r.IntN(50)) * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := make(map[string]int, writers*perWriter)
	sc := bufio.NewScanner(f)
	n, nulls := 0, 0
	for sc.Scan() {
		n++
		if bytes.Equal(bytes.TrimSpace(sc.Bytes()), []byte("null")) {
			nulls++
			continue
		}
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.RequestID == "" {
			t.Fatalf("line %d is no audit line (%v): %q", n, err, sc.Text())
		}
		seen[l.RequestID]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	missing, twice := 0, 0
	for g := range writers {
		for i := range perWriter {
			switch seen[fmt.Sprintf("g%d-%d", g, i)] {
			case 0:
				missing++
			case 1:
			default:
				twice++
			}
		}
	}
	if nulls > 0 || missing > 0 || twice > 0 || n != writers*perWriter {
		t.Fatalf("%d lines in the file for %d written: %d null, %d missing, %d written more than once", n, writers*perWriter, nulls, missing, twice)
	}
}

// barrier makes n goroutines wait for each other, again and again.
type barrier struct {
	mu      sync.Mutex
	cond    *sync.Cond
	n, in   int
	release int
}

func (b *barrier) init(n int) {
	b.n = n
	b.cond = sync.NewCond(&b.mu)
}

func (b *barrier) wait() {
	b.mu.Lock()
	defer b.mu.Unlock()
	gen := b.release
	b.in++
	if b.in == b.n {
		b.in = 0
		b.release++
		b.cond.Broadcast()
		return
	}
	for gen == b.release {
		b.cond.Wait()
	}
}
