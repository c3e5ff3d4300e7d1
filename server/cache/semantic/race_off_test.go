//go:build !race

package semantic

const raceEnabled = false
