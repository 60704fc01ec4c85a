//go:build race

package app

// raceEnabled is true when the tests run under the race detector.
const raceEnabled = true
