//go:build unix

package shard

import (
	"syscall"
	"time"
)

// cpuTime is the process's user+system CPU time, so benchmarks can report
// CPU per operation, which other load on a shared machine does not inflate
// the way it inflates wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
