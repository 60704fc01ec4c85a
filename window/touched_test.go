package window

import (
	"bytes"
	"io"
	"sync/atomic"
	"testing"
	"time"
)

// TestTouchedCoversData checks touched's invariant against a scan of every word: each group in
// which a live slot holds data of its current use is marked, so an export that skips unmarked
// groups passes exactly what a full read would. It also checks that the marks stay tight: a slot
// starts each new use with none, and holds at most one per key written to it. The keys go in by
// TestAndAdd, TestAndRefresh (re-arms write seen keys again) and TestAndAddAt (late keys go to
// older generations), through two full cycles of slot reuse, in every writer mode; then a restore
// from the generations' exports marks exactly the groups that hold data, and a restore from a
// whole snapshot marks every group.
func TestTouchedCoversData(t *testing.T) {
	const keys = 400
	for _, m := range modes {
		for _, op := range []string{"add", "refresh", "at"} {
			t.Run(m.name+"/"+op, func(t *testing.T) {
				clk := newFakeClock()
				cfg := Config{Generations: 3, Interval: time.Minute, Capacity: 20_000, FalsePositiveRate: 1e-3, Clock: clk.Now}
				f := newIn(t, cfg, m)
				for round := range 7 {
					now := clk.Now()
					for i := range keys {
						k := key(uint64(round%2), uint64(i)) // every other round offers the same keys again
						switch op {
						case "add":
							f.TestAndAdd(k)
						case "refresh":
							f.TestAndRefresh(k)
						case "at":
							f.TestAndAddAt(k, now.Add(-time.Duration(i%3)*time.Minute))
						}
					}
					checkTouched(t, f, keys, false)
					clk.Set(now.Add(cfg.Interval))
					f.AdvanceTo(clk.Now())
					if got := marked(f, f.view.Load().cur); got != 0 {
						t.Fatalf("round %d: the new current slot starts with %d marked groups, want 0", round, got)
					}
				}
				meta, gens := exportAll(t, f)
				r, err := restoreFromGens(cfg, meta, gens)
				if err != nil {
					t.Fatal(err)
				}
				checkTouched(t, r, keys, true)
				var buf bytes.Buffer
				err = f.Snapshot(func(m Meta, write func(w io.Writer) (int64, error)) error {
					meta = m
					_, err := write(&buf)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				whole, err := Restore(cfg, meta, &buf)
				if err != nil {
					t.Fatal(err)
				}
				for s := range whole.slots {
					if got := marked(whole, s); got != whole.groups {
						t.Errorf("after a whole-snapshot restore slot %d has %d of %d groups marked", s, got, whole.groups)
					}
				}
			})
		}
	}
}

// checkTouched fails unless every group in which a live slot of f holds data is marked, and no
// live slot has more than keys groups marked (exact: exactly the groups with data marked).
func checkTouched(t *testing.T, f *Filter, keys int, exact bool) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for s, e := range f.slotEpoch {
		if e < 0 {
			continue
		}
		tag := tagOf(f.uses[s].Load())
		withData := uint64(0)
		for g := range f.groups {
			data := false
			f.slotWords(g, s, func(w *uint64) { data = data || canonicalWord(atomic.LoadUint64(w), tag) != 0 })
			if data {
				withData++
				if !f.touched.has(s, g) {
					t.Fatalf("slot %d (generation %d) holds data in group %d, which is not marked", s, e, g)
				}
			}
		}
		got := marked(f, s)
		if got > uint64(keys) || exact && got != withData {
			t.Errorf("slot %d (generation %d): %d groups marked, %d hold data, %d keys offered", s, e, got, withData, keys)
		}
	}
}

// marked returns the number of groups marked for slot s.
func marked(f *Filter, s int) uint64 {
	n := uint64(0)
	for g := range f.groups {
		if f.touched.has(s, g) {
			n++
		}
	}
	return n
}
