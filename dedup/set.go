package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/kdedup/kdedup/window"
)

// Scope says which records share a filter.
type Scope string

// The scopes a Set offers.
const (
	// ScopePartition keeps one filter per input partition. A partition's state can move to another
	// replica on rebalance, and duplicates are only caught within a partition. It is the default.
	ScopePartition Scope = "partition"
	// ScopeGlobal keeps one filter for all partitions, so that duplicates that arrive on different
	// partitions are caught too. It suits single-replica deployments: replicas do not share it.
	ScopeGlobal Scope = "global"
)

// ParseScope returns the Scope named s ("partition" or "global").
func ParseScope(s string) (Scope, error) {
	switch Scope(s) {
	case ScopePartition, ScopeGlobal:
		return Scope(s), nil
	}
	return "", fmt.Errorf("dedup: unknown scope %q (want partition or global)", s)
}

// Persister saves and restores a filter's state. The checkpoint-backed implementation lives
// outside this package; a nil Persister means every filter starts cold and nothing is saved.
// Implementations must be safe for concurrent use by different units.
type Persister interface {
	// Restore returns the filter saved for unit, restored into cfg and aged to now, or (nil, nil)
	// when there is no usable snapshot and the filter must start cold.
	Restore(ctx context.Context, unit string, cfg window.Config) (*window.Filter, error)
	// Save writes f's state for unit.
	Save(ctx context.Context, unit string, f *window.Filter) error
}

// Config configures a Set.
type Config struct {
	// Scope selects per-partition or global filters. Default: ScopePartition.
	Scope Scope
	// Window configures each filter. Under ScopePartition, Capacity is per partition.
	Window window.Config
	// Topic names the input topic; it prefixes snapshot unit names. Default: "input".
	Topic string
	// Persister saves and restores filters. Default: nil, no persistence.
	Persister Persister
	// Logger receives lifecycle messages (never one per record). Default: slog.Default().
	Logger *slog.Logger
}

// FilterStats is a filter's state with the name metrics label it with: the partition number, or
// "global".
type FilterStats struct {
	Name string
	window.Stats
}

// Set routes records to the filter of their scope and answers whether each record's identity was
// seen. It implements the worker's Deduper: Assign before a partition's records, Seen for each
// record, Revoke when the partition goes away.
//
// Seen is safe for concurrent use and takes no lock: it reads an immutable map that Assign and
// Revoke replace. Assign, Revoke, Stats and Close are safe for concurrent use with each other and
// with Seen. Use NewSet; the zero value is not usable.
type Set struct {
	cfg     Config
	filters atomic.Pointer[map[int32]*window.Filter] // ScopePartition
	global  *window.Filter                           // ScopeGlobal

	mu     sync.Mutex // serialises Assign, Revoke and Close
	closed bool

	unassigned atomic.Uint64
}

// NewSet validates cfg and returns a Set. Under ScopeGlobal it builds (or restores) the single
// filter now; under ScopePartition filters are built as partitions are assigned. It returns an
// error wrapping window.ErrConfig or window.ErrMemory for a bad window configuration, and a
// "dedup: ..." error for an unknown scope.
func NewSet(ctx context.Context, cfg Config) (*Set, error) {
	if cfg.Scope == "" {
		cfg.Scope = ScopePartition
	}
	if _, err := ParseScope(string(cfg.Scope)); err != nil {
		return nil, err
	}
	if cfg.Topic == "" {
		cfg.Topic = "input"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if _, err := window.Size(cfg.Window); err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	s := &Set{cfg: cfg}
	empty := map[int32]*window.Filter{}
	s.filters.Store(&empty)
	if cfg.Scope == ScopeGlobal {
		f, err := s.open(ctx, "global")
		if err != nil {
			return nil, err
		}
		s.global = f
	}
	return s, nil
}

// Unit returns the snapshot unit name of a partition's state: "<topic>.p<partition>", or "global"
// under ScopeGlobal.
func (s *Set) Unit(partition int32) string {
	if s.cfg.Scope == ScopeGlobal {
		return "global"
	}
	return s.cfg.Topic + ".p" + strconv.Itoa(int(partition))
}

// open restores the unit's filter or builds a cold one, and starts its rotation.
func (s *Set) open(ctx context.Context, unit string) (*window.Filter, error) {
	var f *window.Filter
	if s.cfg.Persister != nil {
		var err error
		f, err = s.cfg.Persister.Restore(ctx, unit, s.cfg.Window)
		if err != nil {
			return nil, fmt.Errorf("dedup: restoring %s: %w", unit, err)
		}
	}
	if f == nil {
		var err error
		if f, err = window.New(s.cfg.Window); err != nil {
			return nil, fmt.Errorf("dedup: %w", err)
		}
	}
	f.Start()
	return f, nil
}

// Assign prepares the state of a newly assigned partition: it restores the partition's snapshot
// through the Persister, or starts a cold filter. Assigning a partition that is already assigned
// does nothing. Under ScopeGlobal it does nothing. It returns the Persister's error, wrapped, if
// restoring fails for a reason other than a missing or unusable snapshot.
func (s *Set) Assign(ctx context.Context, partition int32) error {
	if s.cfg.Scope == ScopeGlobal {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	cur := *s.filters.Load()
	if _, ok := cur[partition]; ok {
		return nil
	}
	f, err := s.open(ctx, s.Unit(partition))
	if err != nil {
		return err
	}
	next := maps.Clone(cur)
	next[partition] = f
	s.filters.Store(&next)
	return nil
}

// Revoke saves the partition's state through the Persister and drops it. Revoking a partition
// that is not assigned does nothing. Under ScopeGlobal it does nothing: the global filter lives
// until Close. The state is dropped even if saving fails; the error is returned.
func (s *Set) Revoke(ctx context.Context, partition int32) error {
	if s.cfg.Scope == ScopeGlobal {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.filters.Load()
	f, ok := cur[partition]
	if !ok {
		return nil
	}
	next := maps.Clone(cur)
	delete(next, partition)
	s.filters.Store(&next)
	return s.retire(ctx, s.Unit(partition), f)
}

// retire stops a filter's rotation and saves it.
func (s *Set) retire(ctx context.Context, unit string, f *window.Filter) error {
	f.Close()
	if s.cfg.Persister == nil {
		return nil
	}
	if err := s.cfg.Persister.Save(ctx, unit, f); err != nil {
		return fmt.Errorf("dedup: saving %s: %w", unit, err)
	}
	return nil
}

// Seen reports whether id was already seen in the partition's scope, and records it if not. If
// several goroutines offer the same new id at once, exactly one gets false. A partition that is
// not assigned has no state: Seen returns false (the record passes) and counts it, so that nothing
// is ever dropped by mistake.
func (s *Set) Seen(partition int32, id []byte) bool {
	if s.global != nil {
		return s.global.TestAndAdd(id)
	}
	f := (*s.filters.Load())[partition]
	if f == nil {
		s.unassigned.Add(1)
		return false
	}
	return f.TestAndAdd(id)
}

// Unassigned returns how many records Seen passed because their partition had no state. It should
// stay zero; anything else points at a worker bug.
func (s *Set) Unassigned() uint64 { return s.unassigned.Load() }

// Filter returns the filter serving a partition (the global filter under ScopeGlobal), or nil.
func (s *Set) Filter(partition int32) *window.Filter {
	if s.global != nil {
		return s.global
	}
	return (*s.filters.Load())[partition]
}

// Partitions returns the assigned partitions in ascending order (none under ScopeGlobal).
func (s *Set) Partitions() []int32 {
	return slices.Sorted(maps.Keys(*s.filters.Load()))
}

// Stats returns the state of every filter, for metrics.
func (s *Set) Stats() []FilterStats {
	if s.global != nil {
		return []FilterStats{{Name: "global", Stats: s.global.Stats()}}
	}
	cur := *s.filters.Load()
	out := make([]FilterStats, 0, len(cur))
	for _, p := range slices.Sorted(maps.Keys(cur)) {
		out = append(out, FilterStats{Name: strconv.Itoa(int(p)), Stats: cur[p].Stats()})
	}
	return out
}

// Close saves and drops every filter. Later Assign calls fail; Seen keeps answering for the global
// filter and passes records of dropped partitions. It returns the saving errors joined.
func (s *Set) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.global != nil {
		errs = append(errs, s.retire(ctx, "global", s.global))
	}
	cur := *s.filters.Load()
	empty := map[int32]*window.Filter{}
	s.filters.Store(&empty)
	for _, p := range slices.Sorted(maps.Keys(cur)) {
		errs = append(errs, s.retire(ctx, s.Unit(p), cur[p]))
	}
	return errors.Join(errs...)
}

var errClosed = errors.New("dedup: set is closed")
