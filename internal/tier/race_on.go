//go:build race

package tier

// Race reports whether the test binary was built with the race detector.
const Race = true
