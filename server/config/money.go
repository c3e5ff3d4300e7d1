package config

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// NanoPerEUR is the number of nano-euros in one euro.
const NanoPerEUR = 1_000_000_000

// MaxEUR is the largest euro amount (a cap, or a price per million tokens)
// that [Config.Validate] accepts: its nano-euros must fit an int64 with room
// to spare.
const MaxEUR = 1_000_000_000

// eurToNano converts euros to integer nano-euros, rounding half away from
// zero at the ninth decimal. It works on the shortest decimal text of eur
// (what the YAML said: 0.15 is exactly 150000000, not 149999999.99…), so no
// binary float error leaks into the ledger. It fails on NaN, ±Inf and
// amounts whose nano-euros do not fit an int64.
func eurToNano(eur float64) (int64, error) {
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

// nanoOrMax is eurToNano for amounts already checked by Validate; an amount
// Validate refuses saturates to math.MaxInt64, which no budget can afford.
func nanoOrMax(eur float64) int64 {
	n, err := eurToNano(eur)
	if err != nil {
		return math.MaxInt64
	}
	return n
}
