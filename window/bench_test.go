package window

// Benchmarks of the sliding-window filter at a realistic size: 10M distinct keys per window
// (Capacity = 10M/N per interval), every generation filled to design load, against a
// straightforward mutex-protected sliding window of N separate blocked filters (mutexWindow) with
// the same K, the same number of groups and the same bit patterns.
//
// Sub-benchmark names are benchstat keys:
//
//	BenchmarkWindow/op=TestMiss/N=8/p=1e-03/key=16/par=1
//	BenchmarkBaseline/op=TestMiss/N=8/p=1e-03/key=16/par=1
//
// op is TestHit (a key added in one of the N generations, uniformly), TestMiss (a key never
// added), TestAndAdd (a fresh key: a filter with N-1 full generations and an empty current one
// takes it), and the same three on precomputed hashes (TestHitHash, TestMissHash,
// TestAndAddHash, key=hash), which leave out the ~14 ns the seeded xxhash Digest costs for a
// 16-byte key (see BenchmarkHash). par=1 is a plain loop; par=P is b.RunParallel with GOMAXPROCS
// = P goroutines. Keys are pre-generated (1<<20 hits, 1<<20 misses, reused cyclically); fresh
// keys for TestAndAdd are written into a reused buffer (one 8-byte store per op) and their
// hashes are precomputed before the timer starts.
//
// Fixtures (one filter per implementation, N, p, key length and kind) are built on first use, in
// a few seconds each, and cached for the rest of the process; all of them together take about
// 1.5 GiB. Select with -bench to build only what you measure.
//
// TestAndAdd keeps the filter at design load: before each run it starts a fresh current
// generation if the run would push the current one past Capacity. Use -benchtime=Nx with N at
// most Capacity (10M/24 = 416,666 for N=24; 1,250,000 for N=8) so that no rotation happens inside
// the timed loop; a longer run still works but then times a rotation (reusing and sweeping one
// slot) every Capacity operations. BenchmarkSingle runs the TestAndAdd ops on a filter with
// Config.SingleWriter, at par=1 only.
//
// Examples (from the repository root):
//
//	go test ./window -run '^$' -bench 'Window/op=(TestMiss|TestAndAdd)Hash/N=8/p=1e-03' -benchtime=400000x -count=5
//	go test ./window -run '^$' -bench '(Window|Baseline)/op=Test(Hit|Miss)/N=8/' -benchtime=1000000x -count=5
//	go test ./window -run '^$' -bench '(Window|Single)/op=TestAndAddHash/N=8/p=1e-03' -benchtime=400000x -count=5
//	go test ./window -run 'TestMemoryReport' -v
//	go test ./window -run '^$' -bench 'Hash$' -count=5

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

const (
	benchWindowKeys = 10_000_000 // distinct keys in a full window
	benchPool       = 1 << 20    // pre-generated hit and miss keys, reused cyclically
	benchInterval   = time.Minute
	benchAddBatch   = 256 // fresh-key indices a goroutine claims at once

	nsInserted = 1 // namespace of the keys filling the fixtures
	nsAbsent   = 2 // namespace of keys never added
	nsFresh    = 3 // namespace of TestAndAdd's fresh keys

)

var (
	benchGens    = []int{1, 8, 24}
	benchFPRs    = []float64{1e-3, 1e-6}
	benchKeyLens = []int{16, 64}
)

// keyFiller is the tail of 64-byte keys: fixed random bytes after the 16-byte key(ns, i) prefix.
var keyFiller = func() []byte {
	r := rand.New(rand.NewPCG(7, 7))
	b := make([]byte, 64)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

// newKeyBuf returns a klen-byte key buffer for namespace ns; putKeyIndex sets its index.
func newKeyBuf(ns uint64, klen int) []byte {
	b := make([]byte, klen)
	copy(b, keyFiller)
	binary.LittleEndian.PutUint64(b[:8], ns)
	return b
}

func putKeyIndex(b []byte, i uint64) { binary.LittleEndian.PutUint64(b[8:16], i) }

// benchFilter is what the fixtures need from both implementations; the timed loops below call
// the concrete types directly so that no interface call is measured.
type benchFilter interface {
	hash(key []byte) uint64
	TestAndAdd(key []byte) bool
	Test(key []byte) bool
	testHash(h uint64) bool
	AdvanceTo(t time.Time)
}

type fixtureID struct {
	impl string // "window", "single" (window with Config.SingleWriter) or "baseline"
	n    int
	p    float64
	klen int
	add  bool // N-1 full generations and an empty current one, for TestAndAdd
}

type fixture struct {
	once sync.Once
	id   fixtureID

	f     benchFilter
	win   *Filter
	base  *mutexWindow
	clock *fakeClock
	start time.Time

	capacity uint64
	hits     []byte // benchPool keys of klen bytes, flat
	misses   []byte
	hitHash  []uint64
	missHash []uint64
	fpr      float64 // fraction of the miss pool reported seen

	// TestAndAdd state.
	rotMu    sync.Mutex
	epoch    uint64
	next     atomic.Uint64 // next fresh key index
	genStart atomic.Uint64 // fresh index at which the current generation began
}

var fixtures sync.Map // fixtureID → *fixture

func getFixture(b *testing.B, id fixtureID) *fixture {
	v, _ := fixtures.LoadOrStore(id, &fixture{id: id})
	fx := v.(*fixture)
	fx.once.Do(func() {
		b.StopTimer()
		t0 := time.Now()
		fx.build(b)
		b.Logf("built %+v in %v (%d MiB)", id, time.Since(t0).Round(time.Millisecond), fx.bytes()>>20)
		b.StartTimer()
	})
	if fx.f == nil {
		b.Fatalf("fixture %+v failed to build", id)
	}
	return fx
}

func (fx *fixture) bytes() uint64 {
	if fx.win != nil {
		return fx.win.Stats().TotalBytes
	}
	return uint64(len(fx.base.gens)) * uint64(len(fx.base.gens[0].words)) * 8
}

func (fx *fixture) build(b *testing.B) {
	id := fx.id
	fx.capacity = uint64(benchWindowKeys / id.n)
	fx.clock = newFakeClock()
	fx.start = fx.clock.Now()
	cfg := Config{Generations: id.n, Interval: benchInterval, Capacity: fx.capacity, FalsePositiveRate: id.p, Clock: fx.clock.Now}
	switch id.impl {
	case "window", "single":
		cfg.SingleWriter = id.impl == "single"
		f, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		fx.win, fx.f = f, f
	case "baseline":
		s, err := Size(cfg)
		if err != nil {
			b.Fatal(err)
		}
		fx.base = newMutexWindow(s, cfg.Seed)
		fx.f = fx.base
	default:
		b.Fatalf("unknown implementation %q", id.impl)
	}
	full := id.n
	if id.add {
		full = id.n - 1
	}
	buf := newKeyBuf(nsInserted, id.klen)
	for g := range full {
		fx.advance(uint64(g))
		for i := range fx.capacity {
			putKeyIndex(buf, uint64(g)*fx.capacity+i)
			fx.f.TestAndAdd(buf)
		}
	}
	if id.add {
		fx.advance(uint64(full))
		return
	}
	// Hits: inserted keys drawn uniformly from all N generations. Misses: a disjoint namespace.
	r := rand.New(rand.NewPCG(uint64(id.n), math.Float64bits(id.p)))
	fx.hits = make([]byte, benchPool*id.klen)
	fx.misses = make([]byte, benchPool*id.klen)
	fx.hitHash = make([]uint64, benchPool)
	fx.missHash = make([]uint64, benchPool)
	hb, mb := newKeyBuf(nsInserted, id.klen), newKeyBuf(nsAbsent, id.klen)
	var fp int
	for i := range benchPool {
		putKeyIndex(hb, r.Uint64N(uint64(full)*fx.capacity))
		putKeyIndex(mb, uint64(i))
		copy(fx.hits[i*id.klen:], hb)
		copy(fx.misses[i*id.klen:], mb)
		fx.hitHash[i] = fx.f.hash(hb)
		fx.missHash[i] = fx.f.hash(mb)
		if !fx.f.testHash(fx.hitHash[i]) {
			b.Fatalf("%+v: inserted key %x not found", id, hb)
		}
		if fx.f.testHash(fx.missHash[i]) {
			fp++
		}
	}
	fx.fpr = float64(fp) / benchPool
}

// advance moves the fixture's clock and filter to generation e.
func (fx *fixture) advance(e uint64) {
	fx.epoch = e
	t := fx.start.Add(time.Duration(e) * benchInterval)
	fx.clock.Set(t)
	fx.f.AdvanceTo(t)
}

// rotateIfFull starts a new current generation (the oldest expires, so N-1 full generations
// and an empty current one remain) when fresh indices up to end would overfill the current one.
func (fx *fixture) rotateIfFull(end uint64) {
	if end <= fx.genStart.Load()+fx.capacity {
		return
	}
	fx.rotMu.Lock()
	defer fx.rotMu.Unlock()
	if end <= fx.genStart.Load()+fx.capacity {
		return
	}
	fx.advance(fx.epoch + 1)
	fx.genStart.Store(end - benchAddBatch)
}

// prepareAdd makes room in the current generation for a run of n fresh keys and returns the
// first index the run will use.
func (fx *fixture) prepareAdd(n int) uint64 {
	first := fx.next.Load()
	slack := uint64(benchAddBatch * (runtime.GOMAXPROCS(0) + 1))
	if first+uint64(n)+slack > fx.genStart.Load()+fx.capacity && uint64(n)+slack <= fx.capacity {
		fx.rotMu.Lock()
		fx.advance(fx.epoch + 1)
		fx.genStart.Store(first)
		fx.rotMu.Unlock()
	}
	return first
}

// cursor hands out fresh key indices in batches claimed from the fixture, so that goroutines do
// not contend on a shared counter per operation.
type cursor struct {
	fx     *fixture
	i, end uint64
}

func (c *cursor) next() uint64 {
	if c.i == c.end {
		c.i = c.fx.next.Add(benchAddBatch) - benchAddBatch
		c.end = c.i + benchAddBatch
		c.fx.rotateIfFull(c.end)
	}
	v := c.i
	c.i++
	return v
}

// freshHashes precomputes the hashes of the fresh keys a run of n operations may use.
func (fx *fixture) freshHashes(n int) (first uint64, hs []uint64) {
	first = fx.prepareAdd(n)
	hs = make([]uint64, n+benchAddBatch*(runtime.GOMAXPROCS(0)+1))
	buf := newKeyBuf(nsFresh, 16)
	for i := range hs {
		putKeyIndex(buf, first+uint64(i))
		hs[i] = fx.f.hash(buf)
	}
	return first, hs
}

func fprName(p float64) string { return fmt.Sprintf("p=%.0e", p) }

// BenchmarkWindow measures Filter; see the top of this file.
func BenchmarkWindow(b *testing.B) { benchImpl(b, "window") }

// BenchmarkSingle measures Filter with Config.SingleWriter: TestAndAdd from one goroutine (the
// test ops are the same code as BenchmarkWindow's).
func BenchmarkSingle(b *testing.B) { benchImpl(b, "single") }

// BenchmarkBaseline measures mutexWindow, the straightforward N-filter window behind a
// sync.RWMutex, on the same workload.
func BenchmarkBaseline(b *testing.B) { benchImpl(b, "baseline") }

func benchImpl(b *testing.B, impl string) {
	procs := runtime.GOMAXPROCS(0)
	ops := []string{"TestHit", "TestMiss", "TestAndAdd", "TestHitHash", "TestMissHash", "TestAndAddHash"}
	for _, op := range ops {
		b.Run("op="+op, func(b *testing.B) {
			for _, n := range benchGens {
				b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
					for _, p := range benchFPRs {
						b.Run(fprName(p), func(b *testing.B) {
							keyLens := benchKeyLens
							hashed := strings.HasSuffix(op, "Hash")
							if hashed {
								keyLens = []int{16} // hashes of 16-byte keys; the length does not matter
							}
							for _, klen := range keyLens {
								kname := fmt.Sprintf("key=%d", klen)
								if hashed {
									kname = "key=hash"
								}
								b.Run(kname, func(b *testing.B) {
									id := fixtureID{impl: impl, n: n, p: p, klen: klen, add: strings.HasPrefix(op, "TestAndAdd")}
									for _, par := range []int{1, procs} {
										if impl == "single" && (par > 1 || !id.add) {
											continue
										}
										b.Run(fmt.Sprintf("par=%d", par), func(b *testing.B) {
											fx := getFixture(b, id)
											runOp(b, fx, op, par > 1)
										})
										if procs == 1 {
											break
										}
									}
								})
							}
						})
					}
				})
			}
		})
	}
}

func runOp(b *testing.B, fx *fixture, op string, par bool) {
	b.ReportAllocs()
	switch op {
	case "TestHit", "TestMiss":
		pool := fx.hits
		if op == "TestMiss" {
			pool = fx.misses
			b.ReportMetric(fx.fpr, "fpr")
		}
		b.ResetTimer()
		if par {
			b.RunParallel(func(pb *testing.PB) { parTestKeys(fx, pool, pb) })
		} else {
			serialTestKeys(b, fx, pool)
		}
	case "TestHitHash", "TestMissHash":
		pool := fx.hitHash
		if op == "TestMissHash" {
			pool = fx.missHash
			b.ReportMetric(fx.fpr, "fpr")
		}
		b.ResetTimer()
		if par {
			b.RunParallel(func(pb *testing.PB) { parTestHashes(fx, pool, pb) })
		} else {
			serialTestHashes(b, fx, pool)
		}
	case "TestAndAdd":
		fx.prepareAdd(b.N)
		var seen atomic.Int64
		b.ResetTimer()
		if par {
			b.RunParallel(func(pb *testing.PB) { seen.Add(parAddKeys(fx, pb)) })
		} else {
			seen.Add(serialAddKeys(b, fx))
		}
		b.StopTimer()
		b.ReportMetric(float64(seen.Load())/float64(b.N), "seen/op")
	case "TestAndAddHash":
		first, hs := fx.freshHashes(b.N)
		var seen atomic.Int64
		b.ResetTimer()
		if par {
			b.RunParallel(func(pb *testing.PB) { seen.Add(parAddHashes(fx, first, hs, pb)) })
		} else {
			seen.Add(serialAddHashes(b, fx, first, hs))
		}
		b.StopTimer()
		b.ReportMetric(float64(seen.Load())/float64(b.N), "seen/op")
	default:
		b.Fatalf("unknown op %q", op)
	}
}

// goroutineStart spreads the goroutines of a parallel run over the key pools.
var goroutineStart atomic.Uint64

func poolStart() int { return int(goroutineStart.Add(0x9e3779b1) % benchPool) }

// The loops below are written out per implementation so that the calls are direct.

func serialTestKeys(b *testing.B, fx *fixture, pool []byte) {
	kl, j, hits := fx.id.klen, 0, 0
	switch f := fx.f.(type) {
	case *Filter:
		for range b.N {
			if f.Test(pool[j*kl : j*kl+kl]) {
				hits++
			}
			j = (j + 1) & (benchPool - 1)
		}
	case *mutexWindow:
		for range b.N {
			if f.Test(pool[j*kl : j*kl+kl]) {
				hits++
			}
			j = (j + 1) & (benchPool - 1)
		}
	}
	sinkInt.Add(int64(hits))
}

func parTestKeys(fx *fixture, pool []byte, pb *testing.PB) {
	kl, j, hits := fx.id.klen, poolStart(), 0
	switch f := fx.f.(type) {
	case *Filter:
		for pb.Next() {
			if f.Test(pool[j*kl : j*kl+kl]) {
				hits++
			}
			j = (j + 1) & (benchPool - 1)
		}
	case *mutexWindow:
		for pb.Next() {
			if f.Test(pool[j*kl : j*kl+kl]) {
				hits++
			}
			j = (j + 1) & (benchPool - 1)
		}
	}
	sinkInt.Add(int64(hits))
}

func serialTestHashes(b *testing.B, fx *fixture, pool []uint64) {
	j, hits := 0, 0
	switch f := fx.f.(type) {
	case *Filter:
		for range b.N {
			if f.testHash(pool[j]) {
				hits++
			}
			j = (j + 1) & (benchPool - 1)
		}
	case *mutexWindow:
		for range b.N {
			if f.testHash(pool[j]) {
				hits++
			}
			j = (j + 1) & (benchPool - 1)
		}
	}
	sinkInt.Add(int64(hits))
}

func parTestHashes(fx *fixture, pool []uint64, pb *testing.PB) {
	j, hits := poolStart(), 0
	switch f := fx.f.(type) {
	case *Filter:
		for pb.Next() {
			if f.testHash(pool[j]) {
				hits++
			}
			j = (j + 1) & (benchPool - 1)
		}
	case *mutexWindow:
		for pb.Next() {
			if f.testHash(pool[j]) {
				hits++
			}
			j = (j + 1) & (benchPool - 1)
		}
	}
	sinkInt.Add(int64(hits))
}

func serialAddKeys(b *testing.B, fx *fixture) (seen int64) {
	buf := newKeyBuf(nsFresh, fx.id.klen)
	c := cursor{fx: fx}
	switch f := fx.f.(type) {
	case *Filter:
		for range b.N {
			putKeyIndex(buf, c.next())
			if f.TestAndAdd(buf) {
				seen++
			}
		}
	case *mutexWindow:
		for range b.N {
			putKeyIndex(buf, c.next())
			if f.TestAndAdd(buf) {
				seen++
			}
		}
	}
	return seen
}

func parAddKeys(fx *fixture, pb *testing.PB) (seen int64) {
	buf := newKeyBuf(nsFresh, fx.id.klen)
	c := cursor{fx: fx}
	switch f := fx.f.(type) {
	case *Filter:
		for pb.Next() {
			putKeyIndex(buf, c.next())
			if f.TestAndAdd(buf) {
				seen++
			}
		}
	case *mutexWindow:
		for pb.Next() {
			putKeyIndex(buf, c.next())
			if f.TestAndAdd(buf) {
				seen++
			}
		}
	}
	return seen
}

func serialAddHashes(b *testing.B, fx *fixture, first uint64, hs []uint64) (seen int64) {
	c := cursor{fx: fx}
	switch f := fx.f.(type) {
	case *Filter:
		for range b.N {
			if f.testAndAddHash(hs[c.next()-first]) {
				seen++
			}
		}
	case *mutexWindow:
		for range b.N {
			if f.testAndAddHash(hs[c.next()-first]) {
				seen++
			}
		}
	}
	return seen
}

func parAddHashes(fx *fixture, first uint64, hs []uint64, pb *testing.PB) (seen int64) {
	c := cursor{fx: fx}
	switch f := fx.f.(type) {
	case *Filter:
		for pb.Next() {
			if f.testAndAddHash(hs[c.next()-first]) {
				seen++
			}
		}
	case *mutexWindow:
		for pb.Next() {
			if f.testAndAddHash(hs[c.next()-first]) {
				seen++
			}
		}
	}
	return seen
}

var sinkInt atomic.Int64

// BenchmarkHash compares the key hash of Filter (hashKey: xxhash64 seeded by Config.Seed, computed
// in the package for keys under 32 bytes) with the one-shot xxhash.Sum64 (which equals it for seed
// 0). impl=digest keeps its name from when Filter hashed with xxhash's streaming Digest, so that
// benchstat pairs it with main's.
func BenchmarkHash(b *testing.B) {
	for _, klen := range benchKeyLens {
		buf := newKeyBuf(nsFresh, klen)
		f := mustNew(b, Config{Generations: 1, Interval: time.Minute, Capacity: 1000, FalsePositiveRate: 1e-3})
		b.Run(fmt.Sprintf("impl=digest/key=%d", klen), func(b *testing.B) {
			b.ReportAllocs()
			var s uint64
			for i := range b.N {
				putKeyIndex(buf, uint64(i))
				s += f.hash(buf)
			}
			sinkInt.Add(int64(s))
		})
		b.Run(fmt.Sprintf("impl=sum64/key=%d", klen), func(b *testing.B) {
			b.ReportAllocs()
			var s uint64
			for i := range b.N {
				putKeyIndex(buf, uint64(i))
				s += xxhash.Sum64(buf)
			}
			sinkInt.Add(int64(s))
		})
	}
}

// mutexWindow is the straightforward sliding window the benchmarks compare Filter with: N
// separate blocked Bloom filters (blocks of one slot each), in a ring; a key is tested against
// all N in turn, newest first, under a sync.RWMutex (TestAndAdd takes the write lock). It uses
// the groups, sectors and bits that Size gives and the same bit pattern per hash as Filter, so the
// two differ only in memory layout and synchronisation (and mutexWindow has no tag bits to check:
// it clears a generation when it reuses it). It is safe for concurrent use.
type mutexWindow struct {
	mu     sync.RWMutex
	gens   []blocks // gens[cur] is the current generation
	cur    int
	seed   uint64
	epoch  uint64
	origin time.Time
	start  bool
}

func newMutexWindow(s Sizing, seed uint64) *mutexWindow {
	m := &mutexWindow{gens: make([]blocks, s.Generations), seed: seed}
	for i := range m.gens {
		m.gens[i] = newBlocks(s.Groups, 1, layoutParams{sectors: s.Sectors, k: s.K, first: s.FirstBits}, false)
	}
	return m
}

// Hash is the seeded xxhash64 of key, the same value Filter.Hash gives for the same seed.
func (m *mutexWindow) hash(key []byte) uint64 {
	var d xxhash.Digest
	d.ResetWithSeed(m.seed)
	d.Write(key)
	return d.Sum64()
}

// pattern fills p for h: the group from the high bits by multiply-shift, the pattern from the low
// 48 bits as Filter computes it.
func (m *mutexWindow) pattern(h uint64, p *probe) {
	b := &m.gens[0]
	g, _ := bits.Mul64(h, b.groups)
	p.group, p.base, p.tag = g, g*b.groupWords, h&tagMask|1
	b.fillPattern(p)
}

// containsLocked reports whether the pattern is set in any generation, newest first.
func (m *mutexWindow) containsLocked(p *probe) bool {
	i := m.cur
	for range m.gens {
		if m.gens[i].has(p, 0) {
			return true
		}
		if i--; i < 0 {
			i = len(m.gens) - 1
		}
	}
	return false
}

func (m *mutexWindow) Test(key []byte) bool { return m.testHash(m.hash(key)) }

func (m *mutexWindow) testHash(h uint64) bool {
	var p probe
	m.pattern(h, &p)
	m.mu.RLock()
	ok := m.containsLocked(&p)
	m.mu.RUnlock()
	return ok
}

func (m *mutexWindow) TestAndAdd(key []byte) bool { return m.testAndAddHash(m.hash(key)) }

func (m *mutexWindow) testAndAddHash(h uint64) bool {
	var p probe
	m.pattern(h, &p)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.containsLocked(&p) {
		return true
	}
	m.gens[m.cur].put(&p, 0, true)
	return false
}

// AdvanceTo rotates to the generation containing t, counted in benchInterval steps from the first
// call, clearing the generations that expire.
func (m *mutexWindow) AdvanceTo(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.start {
		m.origin, m.start = t, true
		return
	}
	e := uint64(t.Sub(m.origin) / benchInterval)
	for ; m.epoch < e; m.epoch++ {
		m.cur = (m.cur + 1) % len(m.gens)
		clear(m.gens[m.cur].words)
	}
}

// TestMemoryReport prints, for each N of the benchmarks and p = 1e-3, 1e-4 and 1e-6, the memory
// of a 10M-key window and its ratio to one optimal (non-blocked) Bloom filter, 1.44·log2(1/p) bits
// per key, holding either all N·Capacity keys a full window holds or only the (N-1)·Capacity keys
// the window guarantees to remember. Run it with -v to see the table. It checks that the layout
// adds up, that no configuration beats the information-theoretic bound of log2(1/p) bits per key,
// and that N=8 stays within 1.5x of the optimal filter of N·Capacity keys (the memory goal of the sectorized layout).
func TestMemoryReport(t *testing.T) {
	t.Logf("%-3s %-6s %2s %3s %12s %12s %10s %10s %12s %15s %10s",
		"N", "p", "S", "K", "capacity", "TotalBytes", "bits/key", "live b/key", "vs opt(N·C)", "vs opt((N-1)·C)", "predFPR")
	for _, n := range benchGens {
		for _, p := range []float64{1e-3, 1e-4, 1e-6} {
			capacity := uint64(benchWindowKeys / n)
			s, err := Size(Config{Generations: n, Interval: time.Minute, Capacity: capacity, FalsePositiveRate: p})
			if err != nil {
				t.Fatal(err)
			}
			if want := s.Groups*uint64(s.Slots*s.Sectors)*SectorBits/8 + s.Groups*8; s.TotalBytes != want {
				t.Errorf("N=%d p=%g: TotalBytes %d, want groups·(slots·sectors·64 + 8) = %d", n, p, s.TotalBytes, want)
			}
			keys := float64(uint64(n) * capacity)
			bitsPerKey := float64(s.TotalBytes*8) / keys
			live := float64(uint64(n)*s.BitsPerGeneration) / keys
			opt := 1.44 * math.Log2(1/p)
			if bitsPerKey < math.Log2(1/p) {
				t.Errorf("N=%d p=%g: %.2f bits/key is below the information-theoretic bound %.2f", n, p, bitsPerKey, math.Log2(1/p))
			}
			if n == 8 && bitsPerKey/opt > 1.5 {
				t.Errorf("N=8 p=%g: %.3fx the optimal Bloom filter, want at most 1.5x", p, bitsPerKey/opt)
			}
			guaranteed := "n/a (N=1)"
			if n > 1 {
				guaranteed = fmt.Sprintf("%.2fx", float64(s.TotalBytes*8)/(opt*float64(uint64(n-1)*capacity)))
			}
			t.Logf("%-3d %-6.0e %2d %3d %12d %12d %10.2f %10.2f %11.3fx %15s %10.2e",
				n, p, s.Sectors, s.K, capacity, s.TotalBytes, bitsPerKey, live, bitsPerKey/opt, guaranteed, s.PredictedFPR)
		}
	}
	t.Logf("bits/key = TotalBytes·8/(N·Capacity), with tag bits and claim words; live b/key = the N generations' sectors only; opt = 1.44·log2(1/p) bits/key")
}

// TestRateTable prints the operator's table of docs/operations.md ("Choosing the false-positive
// rate"): for N = 8 and a window full at a Capacity of 1M keys per generation, the bytes per key
// of the window, an optimal Bloom filter's 1.44·log2(1/p) bits, their ratio, and the unique
// events lost per billion at design load (PredictedFPR) and at most (the target). It checks that
// every rate of the table, near-exact ones included, stays within 1.5x of the optimal filter.
func TestRateTable(t *testing.T) {
	t.Logf("| rate | S | K | bytes per key | optimal | ratio | lost per 10^9 at design load | at most |")
	for _, p := range []float64{1e-3, 1e-4, 1e-6, 1e-9, 1e-12} {
		const n, capacity = 8, 1_000_000
		s, err := Size(Config{Generations: n, Interval: time.Minute, Capacity: capacity, FalsePositiveRate: p})
		if err != nil {
			t.Fatal(err)
		}
		perKey := float64(s.TotalBytes) / (n * capacity)
		opt := 1.44 * math.Log2(1/p) / 8
		if perKey/opt > 1.5 {
			t.Errorf("p=%g: %.2f bytes per key is %.3fx the optimal Bloom filter, want at most 1.5x", p, perKey, perKey/opt)
		}
		t.Logf("| %g | %d | %d | %.2f | %.2f | %.2f× | %.3g | %.3g |", p, s.Sectors, s.K, perKey, opt, perKey/opt, s.PredictedFPR*1e9, p*1e9)
	}
}
