package metering

import "github.com/flexway/flexway/server/ledger"

// rater is a reservation that knows its per-minute state.
type rater interface{ Rate() ledger.RateState }

// reservationRate is r.Rate(), ledger.NoRate until the ledger has it.
// TEMPORARY: replaced by r.Rate() once i16-ledger is merged.
func reservationRate(r *ledger.Reservation) ledger.RateState {
	if x, ok := any(r).(rater); ok {
		return x.Rate()
	}
	return ledger.NoRate
}
