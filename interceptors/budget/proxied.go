package budget

import (
	"context"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	ledger "github.com/flexway/flexway/server/budget"
	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/faults"
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

// perByteEstimateFactor: a per-byte call reserves, when its first request
// message arrives, this many times that message's size (the request and a
// response of the same size); the commit charges the bytes that passed.
const perByteEstimateFactor = 2

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
// one call at once; a per-byte one reserves, when its first request message
// arrives (before the upstream is called), an estimate of twice that
// message's size. Specialised models report no tokens: only euros are
// charged. After the call, the cost of what passed is committed if the
// upstream served, else the reservation is released.
func (m *Meter) meterProxied(srv any, ss grpc.ServerStream, st *call.State, p Proxied, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	acct := ledger.Account{Tenant: st.Tenant, Agent: st.Agent}
	if k := m.cfg.Known; k != nil && (!k(st.Tenant, "") || (st.Agent != "" && !k(st.Tenant, st.Agent))) {
		return faults.New(faults.InvalidAPIKey, "tenant %q or its agent %q is not declared here: no budget can be charged", st.Tenant, st.Agent)
	}
	s, err := m.cfg.Ledger.Check(ctx, acct)
	if err := refusal(s, err); err != nil {
		return err
	}
	cs := &countingStream{ServerStream: ss, size: m.cfg.FrameSize}
	if p.Metering == PerByte {
		cs.first = func(n int) error {
			res, err := m.cfg.Ledger.Reserve(ctx, acct, ledger.Amount{NanoEUR: costPerThousand(int64(n)*perByteEstimateFactor, p.NanoEURPerThousand)})
			if err != nil {
				return refusal(ledger.State{}, err)
			}
			cs.res = res // under cs.mu, held by RecvMsg
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
	res := cs.reservation()
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
		m.log.ErrorContext(ctx, "served call not committed to the budget ledger",
			"request_id", st.RequestID, "tenant", st.Tenant, "agent", st.Agent, "backend", o.Backend,
			"nano_eur", cost, "error", err.Error())
	}
	return herr
}

// countingStream counts the bytes of the frames a proxied call receives
// and sends.
type countingStream struct {
	grpc.ServerStream
	size  func(m any) (int, bool)
	bytes atomic.Int64 // receiving and sending run on different goroutines

	first func(n int) error // called with the first request message's size; its error ends the call
	mu    sync.Mutex
	res   *ledger.Reservation
}

func (c *countingStream) reservation() *ledger.Reservation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.res
}

func (c *countingStream) RecvMsg(msg any) error {
	err := c.ServerStream.RecvMsg(msg)
	if err != nil {
		return err
	}
	c.count(msg)
	if c.first != nil {
		first := c.first
		c.first = nil
		n, _ := c.size(msg)
		c.mu.Lock()
		defer c.mu.Unlock()
		return first(n)
	}
	return nil
}

func (c *countingStream) SendMsg(msg any) error {
	err := c.ServerStream.SendMsg(msg)
	if err == nil {
		c.count(msg)
	}
	return err
}

func (c *countingStream) count(msg any) {
	if c.size == nil {
		return
	}
	if n, ok := c.size(msg); ok {
		c.bytes.Add(int64(n))
	}
}
