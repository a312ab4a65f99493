//go:build unix

package engine_test

import (
	"syscall"
	"time"
)

// cpuTime is the process's user+system CPU time (all threads), so the
// engine benchmark can report CPU per token beside wall time: other load
// on a shared machine inflates wall time far more than CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
