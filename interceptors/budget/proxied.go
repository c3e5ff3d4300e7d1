package budget

import (
	"context"
	"math"
	"math/bits"

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

// perByteEstimate is the traffic a per-byte call reserves for, in bytes
// (request and response messages together), before its size is known; the
// commit charges the bytes that passed.
const perByteEstimate = 4096

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

// meterProxied runs a proxied call metered by p: the caller's caps are
// checked and the call's cost (per call: the price of one; per byte: an
// estimate) reserved before the handler runs, in euros only (a specialised
// model reports no tokens); after it, the cost of what passed is committed
// if the upstream served, else the reservation is released.
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
	reserve := costPerThousand(1, p.NanoEURPerThousand)
	if p.Metering == PerByte {
		reserve = costPerThousand(perByteEstimate, p.NanoEURPerThousand)
	}
	res, err := m.cfg.Ledger.Reserve(ctx, acct, ledger.Amount{NanoEUR: reserve})
	if err != nil {
		return refusal(ledger.State{}, err)
	}
	cs := &countingStream{ServerStream: ss, size: m.cfg.FrameSize}
	herr := handler(srv, cs)
	o := st.Outcome()
	if !o.Served {
		if err := m.cfg.Ledger.Release(context.WithoutCancel(ctx), res); err != nil {
			m.log.WarnContext(ctx, "budget reservation not released; it expires at its deadline",
				"request_id", st.RequestID, "tenant", st.Tenant, "agent", st.Agent, "error", err.Error())
		}
		return herr
	}
	cost := costPerThousand(1, p.NanoEURPerThousand)
	if p.Metering == PerByte {
		cost = costPerThousand(cs.bytes, p.NanoEURPerThousand)
	}
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
	bytes int64
}

func (c *countingStream) RecvMsg(msg any) error {
	err := c.ServerStream.RecvMsg(msg)
	if err == nil {
		c.count(msg)
	}
	return err
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
		c.bytes += int64(n)
	}
}
