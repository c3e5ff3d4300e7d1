package metering

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/flexway/flexway/server/call"
	"github.com/flexway/flexway/server/ledger"
	"github.com/flexway/flexway/server/money"
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

// ProxiedCall is the metering of one proxied specialised-model call, from
// [Meter.ReserveProxied] to [ProxiedCall.Settle]. Its methods are safe for
// concurrent use: a call receives and sends on different goroutines.
type ProxiedCall struct {
	m     *Meter
	st    *call.State
	p     Proxied
	acct  ledger.Account
	ctx   context.Context // the call's, for the reservations taken as it grows
	bytes atomic.Int64    // of the messages received and sent

	mu       sync.Mutex
	res      *ledger.Reservation   // the call's reservation, committed at the end
	extra    []*ledger.Reservation // taken as the stream grew, released at the end
	reserved int64                 // nano-euros held by res and extra
	checked  ledger.RateState      // the per-minute caps at the check, before any reservation
}

// ReserveProxied readies a proxied call of fullMethod by the caller of st
// before its handler runs (see [Config.Proxied]): it checks the caller's
// caps, then a per-call method reserves the price of one call at once,
// and a per-byte one reserves as its messages pass ([ProxiedCall.Received],
// [ProxiedCall.Send]), twice ahead of their bytes. Specialised models
// report no tokens: only euros are charged.
//
// proxied is false for a method that is not proxied; the call is then
// none of this method's to meter. A proxied method without metering, or
// any proxied call of a meter without a ledger, returns a nil call and
// passes unmetered (still authenticated). Errors are those of
// [Meter.Reserve]'s caps.
func (m *Meter) ReserveProxied(ctx context.Context, st *call.State, fullMethod string) (pc *ProxiedCall, proxied bool, err error) {
	if m.cfg.Proxied == nil {
		return nil, false, nil
	}
	p, ok := m.cfg.Proxied(fullMethod)
	if !ok {
		return nil, false, nil
	}
	if p.Metering == "" || m.cfg.Ledger == nil {
		return nil, true, nil // authenticated, not metered
	}
	acct, err := m.account(st.Tenant, st.Agent)
	if err != nil {
		return nil, true, err
	}
	acct.Policies = budgetNames(st)
	s, err := m.cfg.Ledger.Check(ctx, acct)
	if err := refusal(s, err); err != nil {
		return nil, true, err
	}
	pc = &ProxiedCall{m: m, st: st, p: p, acct: acct, ctx: ctx, checked: s.Rate}
	if p.Metering != PerByte {
		res, err := m.cfg.Ledger.Reserve(ctx, acct, ledger.Amount{NanoEUR: money.PerThousand(1, p.NanoEURPerThousand)})
		if err != nil {
			return nil, true, refusal(ledger.State{}, err)
		}
		pc.res = res
	}
	return pc, true, nil
}

// Rate is the state of the call's per-minute caps for the x-ratelimit-*
// headers ([RateHeaders]): after its reservation for a per-call method;
// at its check, before anything is reserved, for a per-byte one (which
// reserves as its messages pass); [ledger.NoRate] for a nil call.
func (c *ProxiedCall) Rate() ledger.RateState {
	if c == nil {
		return ledger.NoRate
	}
	if res, _ := c.reservations(); res != nil {
		return res.Rate()
	}
	return c.checked
}

// grow makes a per-byte call's reservation cover total bytes, twice ahead
// of them: a stream that would go past a cap ends with the refusal before
// the message that would pass it. Called with mu held.
func (c *ProxiedCall) grow(total int64) error {
	if c.p.Metering != PerByte {
		return nil
	}
	need := money.PerThousand(total, c.p.NanoEURPerThousand)
	if need <= c.reserved {
		return nil
	}
	amt := 2*need - c.reserved
	r, err := c.m.cfg.Ledger.Reserve(c.ctx, c.acct, ledger.Amount{NanoEUR: amt, Continued: c.res != nil})
	if err != nil {
		return refusal(ledger.State{}, err)
	}
	if c.res == nil {
		c.res = r
	} else {
		c.extra = append(c.extra, r)
	}
	c.reserved += amt
	return nil
}

// check makes the reservation cover total bytes.
func (c *ProxiedCall) check(total int64) error {
	if c.p.Metering != PerByte {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.grow(total)
}

// frameSize is the size of msg, a raw frame, in bytes.
func (c *ProxiedCall) frameSize(msg any) int64 {
	if c.m.cfg.FrameSize == nil {
		return 0
	}
	n, _ := c.m.cfg.FrameSize(msg)
	return int64(n)
}

// Received counts msg, a request message the call has received; the
// refusal it returns, when msg takes the call past a cap, ends the call
// (the message is not forwarded).
func (c *ProxiedCall) Received(msg any) error {
	return c.check(c.bytes.Add(c.frameSize(msg)))
}

// Send sends msg, a response message, with send unless it would take the
// call past a cap (the refusal is returned, and msg not sent); a message
// sent is counted.
func (c *ProxiedCall) Send(msg any, send func(msg any) error) error {
	n := c.frameSize(msg)
	if err := c.check(c.bytes.Load() + n); err != nil {
		return err
	}
	err := send(msg)
	if err == nil {
		c.bytes.Add(n)
	}
	return err
}

// reservations returns the call's reservation and those taken as it grew.
func (c *ProxiedCall) reservations() (*ledger.Reservation, []*ledger.Reservation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.res, c.extra
}

// Settle ends the call's metering once its handler has returned: the cost
// of what passed is committed if the upstream served (the outcome gets
// it, for the audit line), else the reservation is released; the
// reservations taken as a per-byte stream grew are returned either way.
// Failures are logged, never returned. Settle on a nil call does nothing.
func (c *ProxiedCall) Settle(ctx context.Context) {
	if c == nil {
		return
	}
	m, st, p := c.m, c.st, c.p
	o := st.Outcome()
	res, extra := c.reservations()
	for _, r := range extra {
		// The first reservation carries the whole commit; the ones taken
		// as the stream grew are returned.
		m.release(context.WithoutCancel(ctx), st, r)
	}
	if !o.Served {
		if res != nil {
			m.release(context.WithoutCancel(ctx), st, res)
		}
		return
	}
	cost := money.PerThousand(1, p.NanoEURPerThousand)
	if p.Metering == PerByte {
		cost = money.PerThousand(c.bytes.Load(), p.NanoEURPerThousand)
	}
	if res == nil {
		// Served without a request message (an empty client stream):
		// nothing was reserved; a reservation of nothing always passes.
		var err error
		if res, err = m.cfg.Ledger.Reserve(ctx, c.acct, ledger.Amount{}); err != nil {
			m.log.ErrorContext(ctx, "served call not committed to the budget ledger",
				"request_id", st.RequestID, "tenant", st.Tenant, "agent", st.Agent, "nano_eur", cost, "error", err.Error())
			return
		}
	}
	o.CostNanoEUR = cost
	st.SetOutcome(o) // the audit line reads what was charged
	m.commit(ctx, st, res, o.Backend, ledger.Amount{NanoEUR: cost}, false)
}
