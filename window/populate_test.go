package window

import (
	"bytes"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// BenchmarkFirstTouch measures what a new filter costs until it holds its first keys: New for
// kdedup's defaults (8 generations of 15 minutes, 1M keys, rate 1e-6, one writer) and the
// insertion of keys fresh keys, per operation, with each way of mapping stage 0: none (the lazy
// first touch of earlier versions: a read maps the zero page, the write copies it), writefirst
// (what New does: each page written before it is read, see blocks.writeFirst), touch (every page
// written when the filter is made) and advise (MADV_POPULATE_WRITE when it is made). Between operations the filter
// is dropped and the heap returned to the kernel, so every operation starts from unmapped
// memory, as a worker that takes a partition does. It reports cpu-ns/op (the process's CPU
// time, the kernel's page-fault work included) and faults/op (minor page faults).
//
//	go test ./window -run '^$' -bench FirstTouch -count 6 | benchstat -col /mode -
func BenchmarkFirstTouch(b *testing.B) {
	for _, keys := range []int{2500, 133_000} {
		for _, mode := range []string{"none", "writefirst", "touch", "advise"} {
			b.Run(fmt.Sprintf("keys=%d/mode=%s", keys, mode), func(b *testing.B) {
				benchFirstTouch(b, keys, mode)
			})
		}
	}
}

func benchFirstTouch(b *testing.B, keys int, mode string) {
	cfg := Config{Generations: 8, Interval: 15 * time.Minute, Capacity: 1_000_000, FalsePositiveRate: 1e-6,
		SingleWriter: true}
	mustNew(b, cfg) // sizes the layout once, outside the timer
	rng := rand.New(rand.NewPCG(1, 2))
	hs := make([]uint64, keys)
	b.ReportAllocs()
	var cpu, faults int64
	for b.Loop() {
		b.StopTimer()
		for i := range hs {
			hs[i] = rng.Uint64()
		}
		runtime.GC()
		debug.FreeOSMemory()
		c0, f0 := processCPU(), minorFaults()
		b.StartTimer()
		f := mustNew(b, cfg)
		switch mode {
		case "none":
			f.pages = nil
		case "touch":
			f.pages = nil
			touchPages(f.words)
		case "advise":
			f.pages = nil
			if !adviseWrite(f.words) {
				b.Skip("no MADV_POPULATE_WRITE")
			}
		}
		for _, h := range hs {
			f.testAndAddHash(h)
		}
		b.StopTimer()
		cpu += int64(processCPU() - c0)
		faults += minorFaults() - f0
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(faults)/float64(b.N), "faults/op")
}

// TestWriteFirst checks that writeFirst marks exactly the pages its ranges touch, whatever the
// offset of the array in its first page, that a filter's writers mark the pages of their groups,
// and that populateWords leaves every word zero.
func TestWriteFirst(t *testing.T) {
	lp := layoutParams{sectors: 2, k: 6, first: 3}
	b := newBlocks(100, 4, lp, false) // 100 × 4 × 2 × 8 words: 6400 words, 13 or 14 pages
	pageOf := func(i uint64) uint64 { return (i + b.pageOff) / pageWords }
	marked := func(pg uint64) bool { return b.pages[pg/64]>>(pg%64)&1 != 0 }
	n := uint64(len(b.words))
	for _, r := range [][2]uint64{{0, 1}, {n - 1, 1}, {700, 2000}, {0, n}} {
		b.writeFirst(r[0], r[1])
		for pg := pageOf(r[0]); pg <= pageOf(r[0]+r[1]-1); pg++ {
			if !marked(pg) {
				t.Fatalf("range %v: page %d not marked", r, pg)
			}
		}
	}
	for pg := pageOf(n-1) + 1; pg < uint64(len(b.pages))*64; pg++ {
		if marked(pg) {
			t.Fatalf("page %d past the array marked", pg)
		}
	}
	if !allZero(b.words) {
		t.Fatal("writeFirst changed a word")
	}

	f := mustNew(t, Config{Generations: 4, Interval: time.Minute, Capacity: 10000, FalsePositiveRate: 1e-3})
	for i := range uint64(1000) {
		h := f.hash(key(1, i))
		f.testAndAddHash(h)
		g, _ := bits.Mul64(h, f.groups)
		for pg := (g*f.groupWords + f.pageOff) / pageWords; pg <= ((g+1)*f.groupWords-1+f.pageOff)/pageWords; pg++ {
			if f.pages[pg/64]>>(pg%64)&1 == 0 {
				t.Fatalf("key %d: page %d of its group not marked", i, pg)
			}
		}
	}

	w := make([]uint64, 3*pageWords+5)
	populateWords(w[3:])
	if !allZero(w) {
		t.Fatal("populateWords changed a word")
	}
}

// TestResidentBytes checks Stats.ResidentBytes: a new filter with a single writer holds only the
// pages its keys reached, a filter restored from its generations only those its generations' data
// needs, and one restored from a single-file snapshot all of stage 0.
func TestResidentBytes(t *testing.T) {
	clock := newFakeClock()
	cfg := Config{Generations: 4, Interval: time.Minute, Capacity: 1_000_000, FalsePositiveRate: 1e-6,
		SingleWriter: true, Clock: clock.Now}
	f := mustNew(t, cfg)
	claims := uint64(len(f.claims)) * 8
	if got := f.Stats().ResidentBytes; got != 0 {
		t.Fatalf("new filter: %d resident bytes, want 0", got)
	}
	const keys = 2000
	addKeys(f, 1, keys)
	st := f.Stats()
	groupPages := (f.groupWords*8+pageSize-1)/pageSize + 1
	if st.ResidentBytes == 0 || st.ResidentBytes > keys*groupPages*pageSize || st.ResidentBytes > st.TotalBytes {
		t.Fatalf("after %d keys: %d resident bytes of %d (at most %d pages per key)", keys, st.ResidentBytes, st.TotalBytes, groupPages)
	}
	meta, gens := exportAll(t, f)
	r, err := restoreFromGens(cfg, meta, gens)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Stats().ResidentBytes; got == 0 || got > st.ResidentBytes {
		t.Fatalf("restored from generations: %d resident bytes, the original %d", got, st.ResidentBytes)
	}
	for i := range uint64(keys) {
		if !r.Test(key(1, i)) {
			t.Fatalf("restored from generations: key %d lost", i)
		}
	}
	var buf bytes.Buffer
	m, _, err := f.WriteSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Restore(cfg, m, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := w.Stats().ResidentBytes, st.TotalBytes-claims; got != want {
		t.Fatalf("restored from a snapshot: %d resident bytes, want %d", got, want)
	}
}
