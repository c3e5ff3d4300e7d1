package cache

import (
	"context"
	"testing"
	"time"
)

// TestFlights: the first to join a key leads, the next follow and get
// what the leader lands; after a leader failed (Abandon) the next miss
// leads again; a key whose answer could not be stored (Pass) is not
// coalesced for a while (its callers go alone), then is again; a follower's context bounds its
// wait; ending a flight twice keeps the first end.
func TestFlights(t *testing.T) {
	var fs Flights
	k := MakeStoreKey(PartitionID{1}, Key{2})
	f, leader := fs.Join(k)
	if !leader || f == nil {
		t.Fatalf("first join: leader %v", leader)
	}
	g, leader := fs.Join(k)
	if leader || g != f {
		t.Fatalf("second join: leader %v, same flight %v", leader, g == f)
	}
	got := make(chan *Entry)
	go func() {
		e, _ := g.Wait(context.Background())
		got <- e
	}()
	e := &Entry{Key: k, Model: "m"}
	f.Land(e)
	f.Abandon() // after Land: nothing
	if w := <-got; w != e {
		t.Fatalf("follower got %v, want the landed entry", w)
	}
	if e, ok := f.Wait(context.Background()); !ok || e.Model != "m" {
		t.Errorf("Wait after Land: %v, %v", e, ok)
	}

	f, leader = fs.Join(k) // landed: a new flight
	if !leader {
		t.Fatal("after Land, a new leader")
	}
	g, _ = fs.Join(k)
	f.Abandon()
	if e, ok := g.Wait(context.Background()); ok || e != nil {
		t.Errorf("abandoned: follower got %v, %v", e, ok)
	}
	f, leader = fs.Join(k)
	if !leader {
		t.Fatal("after a leader failed, the next miss leads again")
	}
	g, _ = fs.Join(k)
	f.Pass()
	if e, ok := g.Wait(context.Background()); ok || e != nil {
		t.Errorf("passed: follower got %v, %v", e, ok)
	}
	if f, leader := fs.Join(k); f != nil || leader {
		t.Errorf("a passed key within 30 s: %v, leader %v; want alone", f, leader)
	}
	fs.passed[k] = time.Now().Add(-time.Second)
	if n := fs.Sweep(); n != 1 {
		t.Errorf("Sweep freed %d, want 1", n)
	}
	f, leader = fs.Join(k)
	if !leader {
		t.Fatal("after the pass expired, a new leader")
	}
	g, _ = fs.Join(k)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, ok := g.Wait(ctx); ok {
		t.Error("a follower whose context ended got an entry")
	}
	f.Land(&Entry{})
	var nilFlight *Flight
	nilFlight.Land(&Entry{}) // nil-safe
}
