//go:build !unix

package consumer_test

import "time"

// processCPU is not available here: benchmarks do not report CPU time.
func processCPU() (time.Duration, bool) { return 0, false }
