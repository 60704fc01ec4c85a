package window

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// memGen is a generation exported to memory: its canonical words.
type memGen struct {
	words []uint64
	pos   int
	fail  error
}

func (g *memGen) ReadWords(dst []uint64) error {
	if g.fail != nil {
		return g.fail
	}
	if len(dst) > len(g.words)-g.pos {
		return fmt.Errorf("read of %d words, %d left", len(dst), len(g.words)-g.pos)
	}
	g.pos += copy(dst, g.words[g.pos:])
	return nil
}

func (g *memGen) Close() error { return nil }

// exportAll exports every live generation of f, returning the Meta and the words by epoch.
func exportAll(t testing.TB, f *Filter) (Meta, map[uint64][]uint64) {
	t.Helper()
	gens := map[uint64][]uint64{}
	var meta Meta
	err := f.SnapshotGenerations(func(x *Export) error {
		meta = x.Meta()
		for _, e := range meta.SlotEpochs {
			if e < 0 {
				continue
			}
			var words []uint64
			if err := x.Generation(uint64(e), func(w []uint64) error { words = append(words, w...); return nil }); err != nil {
				return err
			}
			if want := meta.Sections(uint64(e)); uint64(len(words)) != sum(want) {
				return fmt.Errorf("generation %d exported %d words, sections say %v", e, len(words), want)
			}
			gens[uint64(e)] = words
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return meta, gens
}

func sum(s []uint64) uint64 {
	var n uint64
	for _, v := range s {
		n += v
	}
	return n
}

func restoreFromGens(cfg Config, m Meta, gens map[uint64][]uint64) (*Filter, error) {
	return RestoreGenerations(cfg, m, func(e uint64) (GenerationReader, error) {
		w, ok := gens[e]
		if !ok {
			return nil, fmt.Errorf("no generation %d", e)
		}
		return &memGen{words: w}, nil
	})
}

// TestGenerationsRoundTrip checks that a filter restored from its generations' exports is the
// filter restored from a whole snapshot: same answers, same Meta, same exports; for a filter with
// grown stages, and one caught in the middle of a sweep.
func TestGenerationsRoundTrip(t *testing.T) {
	for _, m := range []mode{modes[1], modes[3]} {
		t.Run(m.name, func(t *testing.T) {
			clock := newFakeClock()
			start := clock.Now()
			cfg := Config{Generations: 3, Interval: time.Second, Capacity: 4_000, FalsePositiveRate: 1e-4, Seed: 5, Clock: clock.Now}
			f := newIn(t, cfg, m)
			for g := range uint64(4) {
				clock.Set(start.Add(time.Duration(g) * time.Second))
				f.AdvanceTo(clock.Now())
				n := uint64(6_000) // grows a stage
				if g == 3 {
					f.sweepStep(f.groups / 2)
					n = 50
				}
				addKeys(f, 90+g, n)
			}
			if f.sweepSlot < 0 || f.Stats().Stages == 0 {
				t.Fatal("setup: want a sweep in progress and grown stages")
			}
			meta, gens := exportAll(t, f)
			var buf bytes.Buffer
			whole, _, err := f.WriteSnapshot(&buf)
			if err != nil {
				t.Fatal(err)
			}
			cfg.SingleWriter = !m.single
			a, err := restoreFromGens(cfg, meta, gens)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Restore(cfg, whole, &buf)
			if err != nil {
				t.Fatal(err)
			}
			checkTags(t, a)
			for ns := uint64(90); ns <= 94; ns++ {
				for i := range uint64(6_000) {
					if x, y := a.Test(key(ns, i)), b.Test(key(ns, i)); x != y {
						t.Fatalf("key %d/%d: restored from generations %v, from the whole snapshot %v", ns, i, x, y)
					}
				}
			}
			am, ag := exportAll(t, a)
			bm, bg := exportAll(t, b)
			am.Versions, bm.Versions = nil, nil
			if fmt.Sprint(am) != fmt.Sprint(bm) || fmt.Sprint(ag) != fmt.Sprint(bg) {
				t.Fatal("the two restored filters differ")
			}
			for e, w := range gens {
				if !slices.Equal(ag[e], w) {
					t.Fatalf("generation %d: re-export differs from the export restored", e)
				}
			}
		})
	}
}

func TestRestoreGenerationsFails(t *testing.T) {
	cfg := Config{Generations: 2, Interval: time.Hour, Capacity: 1_000, FalsePositiveRate: 1e-3}
	f := mustNew(t, cfg)
	addKeys(f, 1, 500)
	meta, gens := exportAll(t, f)
	boom := errors.New("boom")
	_, err := RestoreGenerations(cfg, meta, func(uint64) (GenerationReader, error) { return nil, boom })
	if !errors.Is(err, boom) {
		t.Errorf("open failure: %v", err)
	}
	_, err = RestoreGenerations(cfg, meta, func(uint64) (GenerationReader, error) { return &memGen{fail: boom}, nil })
	if !errors.Is(err, boom) {
		t.Errorf("read failure: %v", err)
	}
	cfg.Seed = 9
	if _, err := restoreFromGens(cfg, meta, gens); !errors.Is(err, ErrIncompatible) {
		t.Errorf("other seed: %v", err)
	}
}

// TestGenerationVersions checks what a version promises: the current generation is never sealed;
// an older one keeps its version while keys go to the current one, and changes it when a key is
// added by its own time; a restored filter's versions are its own.
func TestGenerationVersions(t *testing.T) {
	for _, single := range []bool{false, true} {
		clock := newFakeClock()
		start := clock.Now()
		cfg := Config{Generations: 3, Interval: time.Minute, Capacity: 1_000, FalsePositiveRate: 1e-3, Clock: clock.Now, SingleWriter: single}
		f := mustNew(t, cfg)
		addKeys(f, 1, 100)
		v0 := versionOf(f, 0)
		if v0.Sealed() || v0.Unchanged(versionOf(f, 0)) {
			t.Fatal("the current generation counts as sealed")
		}
		clock.Set(start.Add(time.Minute))
		f.AdvanceTo(clock.Now())
		v1 := versionOf(f, 0)
		addKeys(f, 2, 2_000) // the current generation grows a stage
		if !v1.Sealed() || !v1.Unchanged(versionOf(f, 0)) {
			t.Fatal("keys added to the current generation changed an older one's version")
		}
		if seen, late := f.TestAndAddAt(key(3, 1), start.Add(time.Second)); seen || late {
			t.Fatal("setup: the key should go to generation 0")
		}
		if v1.Unchanged(versionOf(f, 0)) {
			t.Fatal("a key added to generation 0 by its time left its version unchanged")
		}
		meta, gens := exportAll(t, f)
		r, err := restoreFromGens(cfg, meta, gens)
		if err != nil {
			t.Fatal(err)
		}
		if versionOf(f, 0).Unchanged(versionOf(r, 0)) {
			t.Fatal("versions of two filters compare equal")
		}
	}
}

// versionOf returns the version of generation epoch now.
func versionOf(f *Filter, epoch uint64) GenerationVersion { return versionIn(f.Meta(), epoch) }

// TestGenerationsUnderWrites exports while writers keep adding keys: every key added before the
// snapshot started is in the filter restored from the exports.
func TestGenerationsUnderWrites(t *testing.T) {
	cfg := Config{Generations: 2, Interval: time.Hour, Capacity: 200_000, FalsePositiveRate: 1e-6}
	f := mustNew(t, cfg)
	const before = 50_000
	addKeys(f, 40, before)
	stop := keepAdding(f, 41, 2)
	meta, gens := exportAll(t, f)
	stop()
	r, err := restoreFromGens(cfg, meta, gens)
	if err != nil {
		t.Fatal(err)
	}
	if got := seenKeys(r, 40, before); got != before {
		t.Fatalf("%d of %d keys added before the snapshot are in the restored filter", got, before)
	}
}

// TestExportReleases checks that rotation waits for an export only until Release, and that
// Generation fails afterwards.
func TestExportReleases(t *testing.T) {
	clock := newFakeClock()
	f := mustNew(t, Config{Generations: 3, Interval: time.Minute, Capacity: 1000, FalsePositiveRate: 1e-3, Clock: clock.Now})
	err := f.SnapshotGenerations(func(x *Export) error {
		x.Release()
		rotated := make(chan struct{})
		go func() {
			f.AdvanceEventTo(clock.Now().Add(time.Minute))
			close(rotated)
		}()
		select {
		case <-rotated:
		case <-time.After(10 * time.Second):
			t.Fatal("AdvanceEventTo still blocked 10s after Release")
		}
		if err := x.Generation(0, func([]uint64) error { return nil }); err == nil {
			t.Error("Generation after Release succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
