package window

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// budgetConfig is a small filter that draws on b.
func budgetConfig(clock *fakeClock, b *Budget, policy OverloadPolicy) Config {
	return Config{Generations: 2, Interval: time.Minute, Capacity: 10_000, FalsePositiveRate: 1e-3,
		Clock: clock.Now, Budget: b, Overload: policy, SingleWriter: true}
}

// heldBytes returns what f holds of its budget: stage 0 and its live grown stages.
func heldBytes(f *Filter) uint64 { return f.Stats().TotalBytes }

func TestNewBudgetRejectsZero(t *testing.T) {
	if _, err := NewBudget(0); !errors.Is(err, ErrConfig) {
		t.Fatalf("NewBudget(0) = %v, want ErrConfig", err)
	}
}

// TestBudgetSharedByLoad makes two filters share a budget that holds stage 0 of both and a few
// grown stages: the loaded one grows until the budget refuses, the idle one stays at stage 0,
// the budget's use is the sum of the two, and rotation and Release give everything back.
func TestBudgetSharedByLoad(t *testing.T) {
	clock := newFakeClock()
	s, err := Size(budgetConfig(clock, nil, OverloadDrop))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewBudget(2*s.TotalBytes + 200<<10)
	busy := mustNew(t, budgetConfig(clock, b, OverloadDrop))
	idle := mustNew(t, budgetConfig(clock, b, OverloadDrop))
	if got, want := b.Used(), 2*s.TotalBytes; got != want {
		t.Fatalf("Used after two filters = %d, want their stage 0s %d", got, want)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 40 * 10_000 {
		busy.testAndAddHash(rng.Uint64())
	}
	st := busy.Stats()
	if !st.AtCap || st.Stages == 0 || b.Refusals() != 1 {
		t.Fatalf("busy filter: AtCap %v, %d stages, %d refusals; want at the budget after growing, one generation refused", st.AtCap, st.Stages, b.Refusals())
	}
	if got, want := b.Used(), heldBytes(busy)+heldBytes(idle); got != want || got > b.Limit() {
		t.Fatalf("Used = %d, want the filters' %d, at most the limit %d", got, want, b.Limit())
	}
	if idle.Stats().Stages != 0 {
		t.Fatal("the idle filter grew")
	}
	for range 2 { // both generations rotate out: their stages return to the budget
		clock.Set(clock.Now().Add(time.Minute))
		busy.AdvanceTo(clock.Now())
	}
	if got := b.Used(); got != 2*s.TotalBytes {
		t.Fatalf("Used after rotation = %d, want %d", got, 2*s.TotalBytes)
	}
	busy.Release()
	busy.Release()
	idle.Release()
	if got := b.Used(); got != 0 {
		t.Fatalf("Used after Release = %d, want 0", got)
	}
}

// TestBudgetOverloadPass checks that a growth the budget refuses applies OverloadPass as the
// per-filter cap does: new keys are forgotten, not added.
func TestBudgetOverloadPass(t *testing.T) {
	clock := newFakeClock()
	s, _ := Size(budgetConfig(clock, nil, OverloadPass))
	b, _ := NewBudget(s.TotalBytes + 1)
	f := mustNew(t, budgetConfig(clock, b, OverloadPass))
	rng := rand.New(rand.NewPCG(3, 4))
	for range 3 * 10_000 {
		f.testAndAddHash(rng.Uint64())
	}
	if st := f.Stats(); st.Forgotten == 0 || !st.AtCap || st.Stages != 0 {
		t.Fatalf("Forgotten %d, AtCap %v, Stages %d: want keys forgotten at the budget, no stage", st.Forgotten, st.AtCap, st.Stages)
	}
}

// TestBudgetStage0 checks that Size refuses a stage 0 larger than the budget's limit, and that a
// stage 0 that does not fit what is left is taken anyway (Overcommitted).
func TestBudgetStage0(t *testing.T) {
	clock := newFakeClock()
	s, _ := Size(budgetConfig(clock, nil, OverloadDrop))
	small, _ := NewBudget(s.TotalBytes - 1)
	if _, err := New(budgetConfig(clock, small, OverloadDrop)); !errors.Is(err, ErrMemory) {
		t.Fatalf("New over the budget's limit = %v, want ErrMemory", err)
	}
	b, _ := NewBudget(s.TotalBytes + s.TotalBytes/2)
	f1 := mustNew(t, budgetConfig(clock, b, OverloadDrop))
	f2 := mustNew(t, budgetConfig(clock, b, OverloadDrop))
	if !b.Overcommitted() || b.Used() != 2*s.TotalBytes || b.Available() != 0 {
		t.Fatalf("Used %d of %d, Overcommitted %v: want both stage 0s taken", b.Used(), b.Limit(), b.Overcommitted())
	}
	f1.Release()
	f2.Release()
}

// TestBudgetRestore checks that a restored filter takes its stage 0 and grown stages from the
// budget, and that RestoreLimit is the budget's limit when that is lower than the filter's cap.
func TestBudgetRestore(t *testing.T) {
	clock := newFakeClock()
	b, _ := NewBudget(8 << 20)
	f := mustNew(t, budgetConfig(clock, b, OverloadDrop))
	rng := rand.New(rand.NewPCG(5, 6))
	for range 3 * 10_000 {
		f.testAndAddHash(rng.Uint64())
	}
	var buf bytes.Buffer
	var m Meta
	err := f.Snapshot(func(meta Meta, writeData func(io.Writer) (int64, error)) error {
		m = meta
		_, err := writeData(&buf)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	before := b.Used()
	g, err := Restore(budgetConfig(clock, b, OverloadDrop), m, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := b.Used()-before, heldBytes(g); got != want || g.Stats().Stages == 0 {
		t.Fatalf("restore took %d bytes of the budget, want the filter's %d (%d stages)", got, want, g.Stats().Stages)
	}
	if got := RestoreLimit(budgetConfig(clock, b, OverloadDrop)); got != b.Limit() {
		t.Fatalf("RestoreLimit = %d, want the budget's %d", got, b.Limit())
	}
	f.Release()
	g.Release()
	if b.Used() != 0 {
		t.Fatalf("Used = %d after both were released", b.Used())
	}
}

// TestBudgetConcurrent has shared-mode filters grow concurrently against one budget: the
// reservations never exceed the limit and always add up to what the filters hold.
func TestBudgetConcurrent(t *testing.T) {
	clock := newFakeClock()
	cfg := budgetConfig(clock, nil, OverloadDrop)
	cfg.SingleWriter = false
	s, _ := Size(cfg)
	b, _ := NewBudget(4*s.TotalBytes + 1<<20)
	cfg.Budget = b
	filters := []*Filter{mustNew(t, cfg), mustNew(t, cfg), mustNew(t, cfg), mustNew(t, cfg)}
	var wg sync.WaitGroup
	for i, f := range filters {
		for w := range 2 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), uint64(w)))
				for range 20_000 {
					f.testAndAddHash(rng.Uint64())
				}
			})
		}
	}
	wg.Wait()
	var sum uint64
	for _, f := range filters {
		sum += heldBytes(f)
	}
	if b.Used() != sum || b.Used() > b.Limit() {
		t.Fatalf("Used %d, filters hold %d, limit %d", b.Used(), sum, b.Limit())
	}
}
