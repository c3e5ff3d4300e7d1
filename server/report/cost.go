package report

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// NanoPerEUR is the number of nano-euros in one euro.
const NanoPerEUR = 1_000_000_000

// ParseCost parses an audit cost_eur value into nano-euros, exactly. The
// value is the audit's fixed form (server/auditlog's FormatNanoEUR): an
// optional "-", one or more digits, a point and exactly nine digits
// ("0.000024000"); a "+", an exponent, spaces, fewer or more decimals, or an
// amount whose nano-euros do not fit an int64 is an error. A negative cost
// (a refund, should the ledger ever commit one) subtracts, as in the ledger.
func ParseCost(s string) (int64, error) {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	whole, frac, ok := strings.Cut(s, ".")
	if !ok || len(frac) != 9 {
		return 0, errors.New("want exactly 9 decimals, such as \"0.000024000\"")
	}
	if whole == "" || !allDigits(whole) || !allDigits(frac) {
		return 0, errors.New("want digits, a point and 9 decimals, such as \"0.000024000\"")
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > math.MaxInt64/NanoPerEUR {
		return 0, errors.New("too large")
	}
	f, _ := strconv.ParseInt(frac, 10, 64) // nine digits always parse
	n := w * NanoPerEUR
	if n > math.MaxInt64-f {
		return 0, errors.New("too large")
	}
	if neg {
		return -(n + f), nil
	}
	return n + f, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FormatEUR renders nano-euros as an exact decimal number of euros with at
// least two decimals and no trailing zeros beyond them, as the ledger
// prints amounts: 50_000_000_000 → "50.00", 24_000 → "0.000024",
// -1_500_000_000 → "-1.50".
func FormatEUR(nano int64) string {
	neg := nano < 0
	u := uint64(nano)
	if neg {
		u = -u
	}
	frac := strconv.FormatUint(u%NanoPerEUR, 10)
	frac = strings.Repeat("0", 9-len(frac)) + frac
	frac = strings.TrimRight(frac, "0")
	for len(frac) < 2 {
		frac += "0"
	}
	s := strconv.FormatUint(u/NanoPerEUR, 10) + "." + frac
	if neg {
		return "-" + s
	}
	return s
}
