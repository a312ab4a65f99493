//go:build race

package tokenizer_test

// raceEnabled shrinks the heavy cases: the race detector slows the
// vocabulary and model building around the comparisons several times.
const raceEnabled = true
