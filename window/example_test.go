package window_test

import (
	"fmt"
	"time"

	"github.com/kdedup/kdedup/window"
)

// A window of 4 generations of one minute remembers an identity for at least 3 and at most 4
// minutes. The injected clock makes rotation explicit: AdvanceTo moves the filter to a time.
func Example() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f, err := window.New(window.Config{Generations: 4, Interval: time.Minute, Capacity: 1000,
		FalsePositiveRate: 1e-6, Clock: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	defer f.Close()

	fmt.Println(f.TestAndAdd([]byte("order-1"))) // first sighting
	fmt.Println(f.TestAndAdd([]byte("order-1"))) // a duplicate
	f.AdvanceTo(now.Add(3 * time.Minute))
	fmt.Println(f.Test([]byte("order-1"))) // still in the window
	f.AdvanceTo(now.Add(4 * time.Minute))
	fmt.Println(f.Test([]byte("order-1"))) // its generation expired
	// Output:
	// false
	// true
	// true
	// false
}

// With Config.SingleWriter the filter takes no atomic read-modify-write on TestAndAdd, for a
// caller that never calls it from two goroutines at once (kdedup's per-partition filters).
func ExampleConfig_singleWriter() {
	f, err := window.New(window.Config{Generations: 8, Interval: 15 * time.Minute, Capacity: 1_000_000,
		FalsePositiveRate: 1e-6, SingleWriter: true})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	seen := 0
	for i := range 1000 {
		if f.TestAndAdd(fmt.Appendf(nil, "event-%d", i%500)) {
			seen++
		}
	}
	fmt.Println("duplicates:", seen)
	// Output: duplicates: 500
}

// Under event time a record's timestamp picks its generation: TestAndAddAt tests every live
// generation and adds the key to the generation of t. A record older than the oldest live
// generation is late, and not added.
func ExampleFilter_TestAndAddAt() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f, err := window.New(window.Config{Generations: 4, Interval: time.Minute, Capacity: 1000,
		FalsePositiveRate: 1e-6, Clock: func() time.Time { return start }})
	if err != nil {
		panic(err)
	}
	defer f.Close()

	f.AdvanceEventTo(start.Add(10 * time.Minute)) // stream time: generations 7 to 10 are live
	fmt.Println(f.TestAndAddAt([]byte("a"), start.Add(9*time.Minute)))
	fmt.Println(f.TestAndAddAt([]byte("a"), start.Add(10*time.Minute)))
	fmt.Println(f.TestAndAddAt([]byte("b"), start.Add(2*time.Minute)))
	// Output:
	// false false
	// true false
	// false true
}
