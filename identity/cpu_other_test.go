//go:build !unix

package identity

import "time"

// processCPU is not available here.
func processCPU() (time.Duration, bool) { return 0, false }
