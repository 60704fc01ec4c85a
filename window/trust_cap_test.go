package window

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

// capCase is a filter driven to its memory cap: how it is configured and loaded.
type capCase struct {
	name string
	// config returns the filter's Config, its cap set so that the load below reaches it.
	config func(t *testing.T, clock *fakeClock) Config
	// load adds the load to f, whose clock stands at the start of generation 1.
	load func(f *Filter, clock *fakeClock)
}

// capCases are the ways a generation reaches the cap: a fixed capacity with room for stage 1
// only (the last grown stage takes the rest), with no room for any stage (stage 0 takes it), with
// room for stage 1 far past the cap (stage 1 all ones, which its counts explain), an
// auto-sized filter stopped by its Budget, and the same taking late records into the generation
// before the current one (event time).
var capCases = []capCase{
	{"fixed, stage 1 at the cap", func(t *testing.T, clock *fakeClock) Config {
		cfg := capConfig(clock)
		s, _ := Size(cfg)
		cfg.MaxBytes = s.TotalBytes + growthStage(cfg.Capacity, s.ShareFPR, 1, shardLayout(s.GrowAt)).bytes
		return cfg
	}, func(f *Filter, _ *fakeClock) { addKeys(f, 61, 8*5_000) }},
	{"fixed, stage 0 at the cap", func(t *testing.T, clock *fakeClock) Config {
		cfg := capConfig(clock)
		s, _ := Size(cfg)
		cfg.MaxBytes = s.TotalBytes
		return cfg
	}, func(f *Filter, _ *fakeClock) { addKeys(f, 61, 8*5_000) }},
	{"fixed, stage 1 all ones", func(t *testing.T, clock *fakeClock) Config {
		cfg := capConfig(clock)
		s, _ := Size(cfg)
		cfg.MaxBytes = s.TotalBytes + growthStage(cfg.Capacity, s.ShareFPR, 1, shardLayout(s.GrowAt)).bytes
		return cfg
	}, func(f *Filter, _ *fakeClock) { addKeys(f, 61, 40*5_000) }}, // far past the cap: every bit of stage 1 set
	{"auto, at the budget", autoCapConfig, func(f *Filter, _ *fakeClock) { addKeys(f, 61, 60_000) }},
	{"auto, at the budget, late records", autoCapConfig, func(f *Filter, clock *fakeClock) {
		at := clock.Now().Add(-time.Second) // generation 0: older than the current one
		for i := range uint64(60_000) {
			f.TestAndAddAt(key(61, i), at)
		}
	}},
}

// capConfig is a small filter of a fixed capacity, 5,000 keys.
func capConfig(clock *fakeClock) Config {
	return Config{Generations: 2, Interval: time.Minute, Capacity: 5_000, FalsePositiveRate: 1e-3, Seed: 9, Clock: clock.Now}
}

// autoCapConfig is an auto-sized filter whose budget holds stage 0 and about 16k keys more.
func autoCapConfig(t *testing.T, clock *fakeClock) Config {
	cfg := Config{Generations: 2, Interval: time.Minute, Auto: true, FalsePositiveRate: 1e-3, Seed: 9, Clock: clock.Now}
	s, err := Size(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBudget(s.TotalBytes + 24<<10)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Budget = b
	return cfg
}

// cappedFilter returns a filter of c, in generation 1, driven to its cap under policy in mode m.
func cappedFilter(t *testing.T, c capCase, policy OverloadPolicy, m mode) (*Filter, Config) {
	t.Helper()
	clock := newFakeClock()
	cfg := c.config(t, clock)
	cfg.Overload = policy
	f := newIn(t, cfg, mode{name: m.name, single: m.single})
	clock.Set(clock.Now().Add(cfg.Interval))
	f.AdvanceEventTo(clock.Now())
	c.load(f, clock)
	if st := f.Stats(); !st.AtCap {
		t.Fatalf("setup: the filter is not at its cap (%d stages, %d of %d bytes)", st.Stages, st.TotalBytes, st.MaxBytes)
	}
	cfg.SingleWriter = m.single
	return f, cfg
}

// sameAnswers fails t unless f and g answer alike for the load's keys and for new ones.
func sameAnswers(t *testing.T, f, g *Filter) {
	t.Helper()
	for _, ns := range []uint64{61, 62} {
		for i := range uint64(60_000) {
			if a, b := f.Test(key(ns, i)), g.Test(key(ns, i)); a != b {
				t.Fatalf("key (%d, %d): the filter says seen=%v, the restored one %v", ns, i, a, b)
			}
		}
	}
}

// TestRestoreAtCap proves that a filter's own snapshot taken at the memory cap restores, as a
// single file and as generations, and answers as the filter does, under either overload policy
// and in either mode: at the cap under OverloadDrop the stage that takes the keys counts them, so
// that its set bits fit its counts (the set bits of an uncounted capped stage implied several
// times its recorded keys, and Restore refused it as implausible). A snapshot whose bits are
// altered (the capped stage all ones), or whose counts are lowered below what its bits imply,
// is still refused.
func TestRestoreAtCap(t *testing.T) {
	for _, c := range capCases {
		for _, policy := range []OverloadPolicy{OverloadDrop, OverloadPass} {
			for _, m := range []mode{modes[0], modes[2]} {
				t.Run(fmt.Sprintf("%s/%s/%s", c.name, policy, m.name), func(t *testing.T) {
					f, cfg := cappedFilter(t, c, policy, m)
					defer f.Release()
					var buf bytes.Buffer
					meta, _, err := f.WriteSnapshot(&buf)
					if err != nil {
						t.Fatal(err)
					}
					data := buf.Bytes()
					g, err := Restore(cfg, meta, bytes.NewReader(data))
					if err != nil {
						t.Fatalf("Restore of the filter's own snapshot at the cap: %v", err)
					}
					defer g.Release()
					sameAnswers(t, f, g)
					gm, gens := exportAll(t, f)
					h, err := restoreFromGens(cfg, gm, gens)
					if err != nil {
						t.Fatalf("RestoreGenerations of the filter's own export at the cap: %v", err)
					}
					defer h.Release()
					sameAnswers(t, f, h)
					tampered := map[string]func() error{
						"all ones": func() error { _, err := Restore(cfg, meta, bytes.NewReader(allOnes(data))); return err },
					}
					if policy == OverloadDrop {
						tampered["counts quartered"] = func() error {
							_, err := Restore(cfg, quarterCounts(meta), bytes.NewReader(data))
							return err
						}
						tampered["generation counts quartered"] = func() error {
							_, err := restoreFromGens(cfg, quarterCounts(gm), gens)
							return err
						}
					}
					for name, restore := range tampered {
						var ie *ImplausibleError
						if err := restore(); !errors.As(err, &ie) || ie.Reason != ImplausibleFill {
							t.Errorf("%s: Restore = %v, want ErrImplausible (fill)", name, err)
						}
					}
				})
			}
		}
	}
}

// quarterCounts returns m with every fill count, stage 0's and the grown stages', divided by 4:
// what a snapshot whose keys were not counted at the cap, or whose counts were altered, records.
func quarterCounts(m Meta) Meta {
	m.Fill = append([]uint64(nil), m.Fill...)
	for i := range m.Fill {
		m.Fill[i] /= 4
	}
	m.Stages = append([]StageMeta(nil), m.Stages...)
	for i := range m.Stages {
		counts := append([]uint64(nil), m.Stages[i].Counts...)
		for j := range counts {
			counts[j] /= 4
		}
		m.Stages[i].Counts = counts
	}
	return m
}

// TestExportCountsCoverWords adds keys to a filter at its cap between the Meta of an export and
// the export of its words, as a writer does while a checkpoint is written: with the counts of the
// Meta, read before the words, the stage's bits run ahead of its counts and Restore refuses the
// snapshot; with Export.Counts, read after the words, it restores and answers as the filter did
// when its words were exported.
func TestExportCountsCoverWords(t *testing.T) {
	c := capCases[0]
	c.load = func(f *Filter, _ *fakeClock) { addKeys(f, 61, 11_000) } // just past stage 1's capacity
	f, cfg := cappedFilter(t, c, OverloadDrop, modes[2])
	var meta, recounted Meta
	gens := map[uint64][]uint64{}
	err := f.SnapshotGenerations(func(x *Export) error {
		meta = x.Meta()
		addKeys(f, 63, 10_000) // after the Meta, before the words: at the cap, into stage 1
		for _, e := range meta.SlotEpochs {
			if e >= 0 {
				if err := x.Generation(uint64(e), func(w []uint64) error { gens[uint64(e)] = append(gens[uint64(e)], w...); return nil }); err != nil {
					return err
				}
			}
		}
		fill, stages, err := x.Counts()
		recounted = meta
		recounted.Fill = fill
		recounted.Stages = append([]StageMeta(nil), meta.Stages...)
		for i := range recounted.Stages {
			recounted.Stages[i].Counts = stages[i]
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var ie *ImplausibleError
	if _, err := restoreFromGens(cfg, meta, gens); !errors.As(err, &ie) || ie.Reason != ImplausibleFill {
		t.Fatalf("RestoreGenerations with the counts read before the words = %v, want ErrImplausible (fill)", err)
	}
	g, err := restoreFromGens(cfg, recounted, gens)
	if err != nil {
		t.Fatalf("RestoreGenerations with the counts read after the words: %v", err)
	}
	sameAnswers(t, f, g)
	if _, _, err := (&Export{f: f}).Counts(); err == nil {
		t.Error("Counts of a released export succeeded")
	}
}

// TestRestoreLateWrites restores the snapshot of an event-time filter of fixed capacity whose
// older generation took, late, three times its capacity after 500 keys as the current one: the keys a
// late record adds to an older generation are counted, so its bits do not run ahead of its
// recorded keys and Restore takes the filter's own snapshot, in every mode.
func TestRestoreLateWrites(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			cfg := Config{Generations: 4, Interval: time.Hour, Capacity: 4000, FalsePositiveRate: 1e-3,
				Clock: func() time.Time { return base }}
			f := newIn(t, cfg, m)
			defer f.Release()
			f.AdvanceEventTo(base.Add(2 * time.Hour))
			for i := range 500 { // generation 2, current
				f.TestAndAddAt(key(71, uint64(i)), base.Add(2*time.Hour))
			}
			f.AdvanceEventTo(base.Add(3 * time.Hour))
			for i := range 12_000 { // generation 2 again, late: three times its capacity
				f.TestAndAddAt(key(72, uint64(i)), base.Add(2*time.Hour+time.Minute))
			}
			var buf bytes.Buffer
			meta, _, err := f.WriteSnapshot(&buf)
			if err != nil {
				t.Fatal(err)
			}
			g, err := Restore(f.Config(), meta, bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatalf("Restore of the filter's own snapshot after late writes: %v", err)
			}
			defer g.Release()
			sameAnswers(t, f, g)
		})
	}
}
