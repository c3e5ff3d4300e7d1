//go:build !race

package promptcheck

const raceEnabled = false
