// Package credentials is a backend's pool of upstream credentials
// (ai.backends.NAME.credentials; DESIGN.md, AI pipeline stage 10): it picks
// the key of each call, round robin or by weight, and skips a key that
// rests after its upstream's 429 (until its Retry-After) or that is set
// aside after a 401, 402 or 403 (until restart or reload).
//
// The pool knows keys by name and index only, never their values: the
// caller (server/backends/upstream) holds each key's credential at the
// same index. Pick is lock-free: one atomic add and, per key looked at, two
// atomic loads.
package credentials

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"
)

// The values of [Options.Strategy].
const (
	// RoundRobin spreads calls evenly: over N calls each of K usable keys
	// serves N/K, within one. The empty strategy means RoundRobin.
	RoundRobin = "round_robin"
	// Weighted spreads calls in proportion to each key's Weight, through
	// a wheel precomputed by smooth weighted round robin (the nginx
	// algorithm): over one turn of the wheel (the sum of the weights, in
	// calls) each key serves exactly its weight, interleaved.
	Weighted = "weighted"
)

// MaxKeys is the most keys a pool holds: a call's tried keys are one
// 64-bit mask.
const MaxKeys = 64

// MaxWheel bounds the sum of the weights of a weighted pool (after
// division by their greatest common divisor), the length of its wheel.
const MaxWheel = 10000

// DefaultRest is how long a key rests after a 429 that carries no usable
// Retry-After.
const DefaultRest = 60 * time.Second

// Key is one credential of a pool, by name.
type Key struct {
	// Name is the key's name (credentials.keys[i].name): unique in the
	// pool, shown by the admin API, logs and metrics instead of its value.
	Name string
	// Weight is the key's share under [Weighted], at least 1; ignored by
	// [RoundRobin].
	Weight int
}

// Options configures a [Pool].
type Options struct {
	// Backend is the backend's name, for logs.
	Backend string
	// Strategy is [RoundRobin] (or empty) or [Weighted].
	Strategy string
	// Keys are the pool's keys, 1 to [MaxKeys], in configuration order.
	Keys []Key
	// Log receives the once-per-key notice of a key set aside; nil is
	// slog.Default().
	Log *slog.Logger
}

// Pool is a backend's credentials; it is safe for concurrent use.
type Pool struct {
	backend string
	log     *slog.Logger
	keys    []key
	// wheel, for a weighted pool, is the order of key indices one turn
	// serves; nil for round robin.
	wheel []uint8
	next  atomic.Uint64
}

// key is one key's state: restUntil is the Unix time in nanoseconds the
// key rests until (0: never rested), setAside the status that set it aside
// (0: not set aside).
type key struct {
	name      string
	restUntil atomic.Int64
	setAside  atomic.Int32
}

// New validates o and returns its pool, every key usable. Errors name the
// offending key by index and name.
func New(o Options) (*Pool, error) {
	switch {
	case len(o.Keys) == 0:
		return nil, errors.New("credentials: at least one key is required")
	case len(o.Keys) > MaxKeys:
		return nil, fmt.Errorf("credentials: %d keys, at most %d", len(o.Keys), MaxKeys)
	}
	p := &Pool{backend: o.Backend, log: o.Log, keys: make([]key, len(o.Keys))}
	if p.log == nil {
		p.log = slog.Default()
	}
	seen := map[string]bool{}
	for i, k := range o.Keys {
		switch {
		case k.Name == "":
			return nil, fmt.Errorf("credentials: keys[%d]: a name is required", i)
		case seen[k.Name]:
			return nil, fmt.Errorf("credentials: keys[%d]: duplicate name %q", i, k.Name)
		}
		seen[k.Name] = true
		p.keys[i].name = k.Name
	}
	switch o.Strategy {
	case "", RoundRobin:
	case Weighted:
		w, err := wheel(o.Keys)
		if err != nil {
			return nil, err
		}
		p.wheel = w
	default:
		return nil, fmt.Errorf("credentials: unknown strategy %q (want round_robin or weighted)", o.Strategy)
	}
	return p, nil
}

// wheel is the smooth weighted round-robin order of one turn over keys,
// weights first divided by their greatest common divisor.
func wheel(keys []Key) ([]uint8, error) {
	g := 0
	for i, k := range keys {
		if k.Weight < 1 {
			return nil, fmt.Errorf("credentials: keys[%d] (%s): weight %d, want at least 1", i, k.Name, k.Weight)
		}
		g = gcd(g, k.Weight)
	}
	total := 0
	for _, k := range keys {
		total += k.Weight / g
		if total > MaxWheel {
			return nil, fmt.Errorf("credentials: the weights add up to more than %d (after division by their common divisor %d)", MaxWheel, g)
		}
	}
	out := make([]uint8, 0, total)
	current := make([]int, len(keys))
	for range total {
		best := 0
		for i, k := range keys {
			current[i] += k.Weight / g
			if current[i] > current[best] {
				best = i
			}
		}
		current[best] -= total
		out = append(out, uint8(best))
	}
	return out, nil
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Len is the number of keys.
func (p *Pool) Len() int { return len(p.keys) }

// Name is the name of key i.
func (p *Pool) Name(i int) string { return p.keys[i].name }

// Pick returns the index of the key to use for a call at now, skipping the
// keys in tried (bit i set: key i was already tried by this call), the
// resting ones and the ones set aside; ok is false when no key is usable
// ([Pool.Unusable] then says why). Lock-free.
func (p *Pool) Pick(now time.Time, tried uint64) (i int, ok bool) {
	n := p.next.Add(1) - 1
	k := uint64(len(p.keys))
	start := n % k
	if p.wheel != nil {
		start = uint64(p.wheel[n%uint64(len(p.wheel))])
	}
	t := now.UnixNano()
	for j := range k {
		i := (start + j) % k
		if tried&(1<<i) == 0 && p.usable(i, t) {
			return int(i), true
		}
	}
	return 0, false
}

func (p *Pool) usable(i uint64, now int64) bool {
	k := &p.keys[i]
	return k.setAside.Load() == 0 && k.restUntil.Load() <= now
}

// Rest makes key i rest until until: [Pool.Pick] skips it before then. A
// later rest already recorded is kept.
func (p *Pool) Rest(i int, until time.Time) {
	u := until.UnixNano()
	k := &p.keys[i]
	for {
		old := k.restUntil.Load()
		if old >= u || k.restUntil.CompareAndSwap(old, u) {
			return
		}
	}
}

// RestUntil is when a key answered 429 with retryAfterSeconds (0: none
// or unreadable) at now rests until: now plus the seconds, else plus
// [DefaultRest].
func RestUntil(now time.Time, retryAfterSeconds int64) time.Time {
	if retryAfterSeconds <= 0 {
		return now.Add(DefaultRest)
	}
	return now.Add(time.Duration(retryAfterSeconds) * time.Second)
}

// SetAside sets key i aside for the pool's life (until restart or reload),
// status being the upstream's refusal (401, 402 or 403). The first time,
// it logs a warning naming the backend, the key and the status; never the
// key's value, which the pool does not hold.
func (p *Pool) SetAside(i int, status int) {
	k := &p.keys[i]
	if k.setAside.CompareAndSwap(0, int32(status)) {
		p.log.Warn("upstream credential set aside until restart or reload: the upstream refused it",
			"backend", p.backend, "credential", k.name, "status", status)
	}
}

// Unusable says why no key is usable at now: resting is true when at least
// one key rests (the pool is rate limited, not exhausted) and retryAfter
// is then the wait, in whole seconds rounded up and at least 1, until the
// first resting key returns; resting is false when every key is set aside.
func (p *Pool) Unusable(now time.Time) (retryAfter int64, resting bool) {
	t := now.UnixNano()
	earliest := int64(0)
	for i := range p.keys {
		k := &p.keys[i]
		if k.setAside.Load() != 0 {
			continue
		}
		u := k.restUntil.Load()
		if !resting || u < earliest {
			earliest, resting = u, true
		}
	}
	if !resting {
		return 0, false
	}
	d := earliest - t
	secs := (d + int64(time.Second) - 1) / int64(time.Second)
	return max(secs, 1), true
}

// The values of [State.State].
const (
	// StateOK: the key is used.
	StateOK = "ok"
	// StateResting: the key rests after a 429 until [State.Until].
	StateResting = "resting"
	// StateSetAside: the key was refused with [State.Status].
	StateSetAside = "set_aside"
)

// State is one key's state at a moment, for the admin API.
type State struct {
	// Name is the key's name; its value is never shown.
	Name string
	// State is [StateOK], [StateResting] or [StateSetAside].
	State string
	// Until is when a resting key returns; zero otherwise.
	Until time.Time
	// Status is the upstream status that set the key aside; 0 otherwise.
	Status int
}

// String is the state as the admin API and console show it: "ok",
// "resting until <RFC 3339, UTC>" or "set aside: <status>".
func (s State) String() string {
	switch s.State {
	case StateResting:
		return "resting until " + s.Until.UTC().Format(time.RFC3339)
	case StateSetAside:
		return "set aside: " + strconv.Itoa(s.Status)
	}
	return StateOK
}

// States is a snapshot of every key's state at now, in configuration
// order.
func (p *Pool) States(now time.Time) []State {
	out := make([]State, len(p.keys))
	t := now.UnixNano()
	for i := range p.keys {
		k := &p.keys[i]
		s := State{Name: k.name, State: StateOK}
		if st := k.setAside.Load(); st != 0 {
			s.State, s.Status = StateSetAside, int(st)
		} else if u := k.restUntil.Load(); u > t {
			s.State, s.Until = StateResting, time.Unix(0, u)
		}
		out[i] = s
	}
	return out
}
