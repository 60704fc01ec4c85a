//go:build !unix

package window

import "time"

// processCPU returns 0: this system's CPU time is not read.
func processCPU() time.Duration { return 0 }

func minorFaults() int64 { return 0 }
