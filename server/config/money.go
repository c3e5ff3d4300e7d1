package config

import (
	"math"

	"github.com/flexway/flexway/server/money"
)

// MaxEUR is the largest euro amount (a cap, or a price per million tokens)
// that [Config.Validate] accepts: its nano-euros must fit an int64 with room
// to spare.
const MaxEUR = 1_000_000_000

// nanoOrMax is [money.EURToNano] for amounts already checked by Validate;
// an amount Validate refuses saturates to math.MaxInt64, which no budget
// can afford.
func nanoOrMax(eur float64) int64 {
	n, err := money.EURToNano(eur)
	if err != nil {
		return math.MaxInt64
	}
	return n
}
