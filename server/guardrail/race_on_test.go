//go:build race

package guardrail

// raceEnabled: the race detector slows Find several times; timing bounds
// do not apply.
const raceEnabled = true
