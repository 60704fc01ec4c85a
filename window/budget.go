package window

import (
	"fmt"
	"runtime"
	"sync/atomic"
)

// Budget is a memory budget that any number of filters share (kdedup: one per worker, for the
// filters of all its assigned partitions, or its one global filter). A filter whose Config.Budget
// is set takes its stage 0 from the budget when it is made or restored, reserves every stage it
// grows from it, and returns a grown stage's memory when its generation rotates out and all of its
// memory when it is released (Filter.Release) or garbage collected. So the filters share the
// budget by load: the one that takes more distinct keys grows further, while the budget lasts.
// When a growth does not fit, the generation stops growing and Config.Overload applies, as at
// Config.MaxBytes; Refusals counts the generations so stopped. A stopped generation asks again
// for every new key that finds its stages full, so it grows again as soon as another filter
// returns memory.
//
// Stage 0 and the grown stages of a restored snapshot are taken even past the limit: a filter
// cannot serve its partition without them, and refusing a restore would lose the state. Used then
// exceeds Limit, every growth is refused until enough memory is returned, and Overcommitted says
// so. Sizing code (the capacity of a new filter) can ask Available before it sizes one.
//
// A Budget is safe for concurrent use. The zero value is not usable: use NewBudget.
type Budget struct {
	limit    uint64
	used     atomic.Uint64
	refusals atomic.Uint64
}

// NewBudget returns an empty budget of limit bytes. It returns an error wrapping ErrConfig when
// limit is zero.
func NewBudget(limit uint64) (*Budget, error) {
	if limit == 0 {
		return nil, fmt.Errorf("%w: memory budget must be > 0", ErrConfig)
	}
	return &Budget{limit: limit}, nil
}

// Limit returns the budget's size in bytes.
func (b *Budget) Limit() uint64 { return b.limit }

// Used returns the bytes the filters drawing on the budget hold now. It can exceed Limit (see
// Budget).
func (b *Budget) Used() uint64 { return b.used.Load() }

// Available returns the bytes that can still be reserved: Limit minus Used, or 0.
func (b *Budget) Available() uint64 {
	u := b.used.Load()
	if u >= b.limit {
		return 0
	}
	return b.limit - u
}

// Overcommitted reports whether the filters hold more than Limit (see Budget).
func (b *Budget) Overcommitted() bool { return b.used.Load() > b.limit }

// Refusals returns how many generations the budget stopped from growing since it was made: each
// needed a stage that did not fit, after which its filter's overload policy applied. A generation
// counts once however often it asks again.
func (b *Budget) Refusals() uint64 { return b.refusals.Load() }

// Reserve takes n bytes if they fit under Limit and reports whether they did.
func (b *Budget) Reserve(n uint64) bool {
	for {
		u := b.used.Load()
		if u+n < u || u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// Take takes n bytes whether or not they fit (see Budget).
func (b *Budget) Take(n uint64) { b.used.Add(n) }

// Release returns n bytes taken by Reserve or Take.
func (b *Budget) Release(n uint64) { b.used.Add(-n) }

// budgetShare is what one filter holds of a Budget. It lives apart from the Filter so that the
// filter's cleanup can return it once the filter is collected.
type budgetShare struct {
	b        *Budget
	held     atomic.Uint64
	released atomic.Bool // Filter.Release ran: the filter no longer draws on the budget
}

// refused counts a generation the budget stopped from growing (nil share: nothing).
func (s *budgetShare) refused() {
	if s != nil {
		s.b.refusals.Add(1)
	}
}

// reserve reserves n bytes of the budget for the filter (nil or released share: always true).
func (s *budgetShare) reserve(n uint64) bool {
	if s == nil || s.released.Load() {
		return true
	}
	if !s.b.Reserve(n) {
		return false
	}
	s.held.Add(n)
	return true
}

// take takes n bytes of the budget for the filter, past the limit if need be.
func (s *budgetShare) take(n uint64) {
	if s != nil && !s.released.Load() {
		s.b.Take(n)
		s.held.Add(n)
	}
}

// release returns n bytes the filter held.
func (s *budgetShare) release(n uint64) {
	if s != nil && !s.released.Load() {
		s.held.Add(-n)
		s.b.Release(n)
	}
}

// releaseAll returns everything the filter holds, once: the share no longer draws on the budget
// afterwards.
func (s *budgetShare) releaseAll() {
	if s != nil && !s.released.Swap(true) {
		s.b.Release(s.held.Swap(0))
	}
}

// attachBudget makes f draw on cfg.Budget: it takes stage 0 now and returns f's share when f
// is collected.
func (f *Filter) attachBudget() {
	if f.cfg.Budget == nil {
		return
	}
	f.budget = &budgetShare{b: f.cfg.Budget}
	f.budget.take(f.sizing.TotalBytes)
	runtime.AddCleanup(f, func(s *budgetShare) { s.releaseAll() }, f.budget)
}

// Release returns the memory the filter holds to its Config.Budget, for a caller that drops the
// filter: the budget does not wait for the garbage collector. A released filter stays usable but
// no longer draws on the budget (call it only on a filter that takes no more keys). Without a
// budget it does nothing. It is safe for concurrent use and idempotent.
func (f *Filter) Release() { f.budget.releaseAll() }
