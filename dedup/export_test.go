package dedup

import (
	"context"

	"github.com/kdedup/kdedup/window"
)

// What only the tests use of a Set.

// Filter returns the filter serving a partition (the global filter under ScopeGlobal), or nil.
func (s *Set) Filter(partition int32) *window.Filter {
	if g, ok := s.scope.(*sharedScope); ok {
		return g.global.Load().f
	}
	if pt := s.part(partition); pt != nil {
		return pt.f
	}
	return nil
}

// Partitions returns the assigned partitions in ascending order.
func (s *Set) Partitions() []int32 { return s.partitions() }

// Checkpoint snapshots every filter now. It returns the errors joined; a failed unit does not stop
// the others.
func (s *Set) Checkpoint(ctx context.Context) error { return s.checkpointAll(ctx) }
