//go:build race

package ringmember

const raceEnabled = true
