//go:build unix

package window

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) the process has used so far, or 0 if the
// system does not say.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// minorFaults returns the minor page faults the process has taken so far, or 0 if the system does
// not say.
func minorFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Minflt)
}
