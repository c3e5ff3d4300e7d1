//go:build race

package promptcheck

// raceEnabled: the race detector slows the checks several times; timing bounds
// do not apply.
const raceEnabled = true
