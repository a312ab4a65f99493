//go:build !race

package tokenizer_test

const raceEnabled = false
