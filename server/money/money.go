// Package money converts configured euro amounts to the integer nano-euros
// (10⁻⁹ €) Flexway counts in: budgets, prices and charges never accumulate
// floats.
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
