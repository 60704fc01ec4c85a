//go:build race

package consumer_test

// raceEnabled is true when the tests run under the race detector, whose shadow memory
// multiplies a process's RSS: memory bounds are not checked then.
const raceEnabled = true
