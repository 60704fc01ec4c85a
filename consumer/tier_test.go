package consumer_test

import "github.com/kdedup/kdedup/internal/tier"

// The package's integration tests exercise concurrent code (partition loops, the committer,
// pipelined fetch and produce), so the race run runs them too.
func init() { tier.ConcurrentPackage() }
