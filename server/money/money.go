// Package money is Flexway's one home for money: it converts configured
// euro amounts to the integer nano-euros (10⁻⁹ €) Flexway counts in, parses
// and formats nano-euros as exact decimal euros, and does the saturating
// int64 arithmetic of metering (charges from prices, and the tokens and
// nano-euros counted against caps). Budgets, prices and charges never
// accumulate floats: every function here is exact or says how it rounds.
package money

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// NanoPerEUR is the number of nano-euros in one euro.
const NanoPerEUR = 1_000_000_000

// EURToNano converts euros to integer nano-euros, rounding half away from
// zero at the ninth decimal. It works on the shortest decimal text of eur
// (what a YAML file or a proto option said: 0.15 is exactly 150000000, not
// 149999999.99…), so no binary float error leaks into a charge. It fails on
// NaN, ±Inf ("not a number") and amounts whose nano-euros do not fit an
// int64 ("too large").
func EURToNano(eur float64) (int64, error) {
	if math.IsNaN(eur) || math.IsInf(eur, 0) {
		return 0, errors.New("not a number")
	}
	s := strconv.FormatFloat(math.Abs(eur), 'f', -1, 64)
	whole, frac, _ := strings.Cut(s, ".")
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > math.MaxInt64/NanoPerEUR-1 {
		return 0, errors.New("too large")
	}
	digits := (frac + "000000000")[:9]
	f, _ := strconv.ParseInt(digits, 10, 64) // nine decimal digits always parse
	nano := w*NanoPerEUR + f
	if len(frac) > 9 && frac[9] >= '5' {
		nano++
	}
	if eur < 0 {
		nano = -nano
	}
	return nano, nil
}

// ParseEURFixed parses euros written in the fixed form of [FormatEURFixed]
// (the audit line's cost_eur) into nano-euros, exactly: an optional "-",
// one or more digits, a point and exactly nine digits ("0.000024000"). A
// "+", an exponent, spaces, fewer or more decimals, or an amount whose
// nano-euros do not fit an int64 is an error. A negative amount (a refund)
// parses to negative nano-euros.
func ParseEURFixed(s string) (int64, error) {
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

// FormatEURFixed writes nano-euros as euros with exactly nine decimals, the
// form of the audit line's cost_eur that [ParseEURFixed] reads back:
// 24_000 → "0.000024000", -5 → "-0.000000005". Every int64 is written
// exactly, math.MinInt64 included.
func FormatEURFixed(nano int64) string {
	sign, u := split(nano)
	frac := strconv.FormatUint(u%NanoPerEUR, 10)
	return sign + strconv.FormatUint(u/NanoPerEUR, 10) + "." + "000000000"[len(frac):] + frac
}

// FormatEUR writes nano-euros as an exact decimal number of euros with at
// least two decimals and no trailing zeros beyond them, as messages, the
// report and the console show amounts: 50_000_000_000 → "50.00", 24_000 →
// "0.000024", -1_500_000_000 → "-1.50". Every int64 is written exactly.
func FormatEUR(nano int64) string {
	sign, u := split(nano)
	frac := strconv.FormatUint(u%NanoPerEUR, 10)
	frac = strings.TrimRight("000000000"[len(frac):]+frac, "0")
	if len(frac) < 2 {
		frac += "00"[len(frac):]
	}
	return sign + strconv.FormatUint(u/NanoPerEUR, 10) + "." + frac
}

// split returns the sign ("-" or "") and the magnitude of nano; the
// magnitude of math.MinInt64 fits a uint64.
func split(nano int64) (string, uint64) {
	if nano < 0 {
		return "-", -uint64(nano)
	}
	return "", uint64(nano)
}
