//go:build race

package semantic

// raceEnabled: the race detector slows the recall test's brute force
// tenfold; it runs on fewer vectors (the recall figures are the
// benchmarks').
const raceEnabled = true
