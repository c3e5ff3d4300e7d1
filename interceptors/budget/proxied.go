package budget

import (
	"context"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/ledger"
)

// Proxied is the metering of a proxied specialised-model method, read from
// its (flexway.v1.operation).ai option.
type Proxied struct {
	// Metering is "per_call", "per_byte", or "" (not metered: the call is
	// still authenticated, and passes).
	Metering string
	// NanoEURPerThousand is price_per_thousand in nano-euros: per 1,000
	// calls (per_call) or per 1,000 bytes of request and response
	// messages (per_byte).
	NanoEURPerThousand int64
}

// Metering modes of [Proxied].
const (
	PerCall = "per_call"
	PerByte = "per_byte"
)

// costPerThousand is units × nanoPerThousand / 1000 nano-euros, rounded up,
// saturating.
func costPerThousand(units, nanoPerThousand int64) int64 {
	if units <= 0 || nanoPerThousand <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(units), uint64(nanoPerThousand))
	if hi >= 1000 {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, 1000)
	if r > 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// meterProxied runs a proxied call metered by p. The caller's caps are
// checked before the handler runs. A per-call method reserves the price of
// one call at once; a per-byte one reserves as its messages pass, twice
// ahead of their bytes (the first request message is reserved for before
// the upstream is called), and a message that would take it past a cap
// ends it with the refusal. Specialised models report no tokens: only euros are
// charged. After the call, the cost of what passed is committed if the
// upstream served, else the reservation is released.
func (m *Meter) meterProxied(srv any, ss grpc.ServerStream, st *call.State, p Proxied, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	acct, err := m.account(st.Tenant, st.Agent)
	if err != nil {
		return err
	}
	s, err := m.cfg.Ledger.Check(ctx, acct)
	if err := refusal(s, err); err != nil {
		return err
	}
	cs := &countingStream{ServerStream: ss, size: m.cfg.FrameSize}
	if p.Metering == PerByte {
		// The reservation grows with the bytes that pass, twice ahead of
		// them; a stream that would go past a cap ends with the refusal
		// before the message that would pass it.
		cs.grow = func(total int64) error {
			need := costPerThousand(total, p.NanoEURPerThousand)
			if need <= cs.reserved {
				return nil
			}
			amt := 2*need - cs.reserved
			r, err := m.cfg.Ledger.Reserve(ctx, acct, ledger.Amount{NanoEUR: amt})
			if err != nil {
				return refusal(ledger.State{}, err)
			}
			if cs.res == nil {
				cs.res = r
			} else {
				cs.extra = append(cs.extra, r)
			}
			cs.reserved += amt
			return nil
		}
	} else {
		res, err := m.cfg.Ledger.Reserve(ctx, acct, ledger.Amount{NanoEUR: costPerThousand(1, p.NanoEURPerThousand)})
		if err != nil {
			return refusal(ledger.State{}, err)
		}
		cs.res = res
	}
	herr := handler(srv, cs)
	o := st.Outcome()
	res, extra := cs.reservations()
	for _, r := range extra {
		// The first reservation carries the whole commit; the ones taken
		// as the stream grew are returned.
		if err := m.cfg.Ledger.Release(context.WithoutCancel(ctx), r); err != nil {
			m.log.WarnContext(ctx, "budget reservation not released; it expires at its deadline",
				"request_id", st.RequestID, "tenant", st.Tenant, "agent", st.Agent, "error", err.Error())
		}
	}
	if !o.Served {
		if res != nil {
			if err := m.cfg.Ledger.Release(context.WithoutCancel(ctx), res); err != nil {
				m.log.WarnContext(ctx, "budget reservation not released; it expires at its deadline",
					"request_id", st.RequestID, "tenant", st.Tenant, "agent", st.Agent, "error", err.Error())
			}
		}
		return herr
	}
	cost := costPerThousand(1, p.NanoEURPerThousand)
	if p.Metering == PerByte {
		cost = costPerThousand(cs.bytes.Load(), p.NanoEURPerThousand)
	}
	if res == nil {
		// Served without a request message (an empty client stream):
		// nothing was reserved; a reservation of nothing always passes.
		if res, err = m.cfg.Ledger.Reserve(ctx, acct, ledger.Amount{}); err != nil {
			m.log.ErrorContext(ctx, "served call not committed to the budget ledger",
				"request_id", st.RequestID, "tenant", st.Tenant, "agent", st.Agent, "nano_eur", cost, "error", err.Error())
			return herr
		}
	}
	o.CostNanoEUR = cost
	st.SetOutcome(o) // the audit line reads what was charged
	if err := m.cfg.Ledger.Commit(ctx, res, ledger.Amount{NanoEUR: cost}); err != nil {
		m.log.ErrorContext(ctx, commitFailure(err),
			"request_id", st.RequestID, "tenant", st.Tenant, "agent", st.Agent, "backend", o.Backend,
			"nano_eur", cost, "error", err.Error())
	}
	return herr
}

// countingStream counts the bytes of the frames a proxied call receives
// and sends and, for a per-byte call, keeps the reservation ahead of them.
type countingStream struct {
	grpc.ServerStream
	size  func(m any) (int, bool)
	bytes atomic.Int64 // receiving and sending run on different goroutines

	grow     func(total int64) error // per byte: make the reservation cover total bytes; called with mu held
	mu       sync.Mutex
	res      *ledger.Reservation   // the call's reservation, committed at the end
	extra    []*ledger.Reservation // taken as the stream grew, released at the end
	reserved int64                 // nano-euros held by res and extra
}

func (c *countingStream) reservations() (*ledger.Reservation, []*ledger.Reservation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.res, c.extra
}

// check makes the reservation cover total bytes.
func (c *countingStream) check(total int64) error {
	if c.grow == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.grow(total)
}

func (c *countingStream) frameSize(msg any) int64 {
	if c.size == nil {
		return 0
	}
	n, _ := c.size(msg)
	return int64(n)
}

// RecvMsg counts a request message; one that takes the call past a cap
// ends it (the message is not forwarded).
func (c *countingStream) RecvMsg(msg any) error {
	if err := c.ServerStream.RecvMsg(msg); err != nil {
		return err
	}
	return c.check(c.bytes.Add(c.frameSize(msg)))
}

// SendMsg sends a response message unless it would take the call past a
// cap.
func (c *countingStream) SendMsg(msg any) error {
	n := c.frameSize(msg)
	if err := c.check(c.bytes.Load() + n); err != nil {
		return err
	}
	err := c.ServerStream.SendMsg(msg)
	if err == nil {
		c.bytes.Add(n)
	}
	return err
}
