package bench

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/cespare/xxhash/v2"
	"github.com/greatroar/blobloom"

	"github.com/kdedup/kdedup/window"
)

const (
	totalKeys   = 10_000_000 // distinct keys at design load, for every implementation
	generations = 8          // window.Filter's N
	genCapacity = totalKeys / generations
	pool        = 1 << 20 // pre-generated hit and miss keys, reused cyclically
	addBatch    = 256     // fresh-key indices a goroutine claims at once
	interval    = time.Minute

	nsInserted = 1 // namespace of the keys filling the fixtures
	nsAbsent   = 2 // keys never added
	nsFresh    = 3 // fresh keys for TestAndAdd
)

var (
	fprs    = []float64{1e-3, 1e-6}
	keyLens = []int{16, 64}
	impls   = []string{"window", "windowsw", "blobloom", "bitsbloom"}
)

// keyFiller is the tail of 64-byte keys: fixed random bytes after the 16-byte (namespace, index)
// prefix, the same layout as the window package's benchmarks.
var keyFiller = func() []byte {
	r := rand.New(rand.NewPCG(7, 7))
	b := make([]byte, 64)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

func newKeyBuf(ns uint64, klen int) []byte {
	b := make([]byte, klen)
	copy(b, keyFiller)
	binary.LittleEndian.PutUint64(b[:8], ns)
	return b
}

func putKeyIndex(b []byte, i uint64) { binary.LittleEndian.PutUint64(b[8:16], i) }

// hashKey is the hash every implementation is fed on the hash-level benchmarks: xxhash64 with
// seed 0, which is exactly window.Filter.Hash for Config.Seed 0 (checked when a window fixture
// is built).
func hashKey(k []byte) uint64 { return xxhash.Sum64(k) }

// lockedBits is bits-and-blooms/bloom/v3 behind a sync.Mutex, the usual way to share it.
type lockedBits struct {
	mu sync.Mutex
	f  *bloom.BloomFilter
}

type fixtureID struct {
	impl string
	p    float64
	klen int
	add  bool // room for genCapacity fresh keys: window with 7 full generations and an empty current one, the others filled to totalKeys-genCapacity
}

type fixture struct {
	once sync.Once
	id   fixtureID

	win   *window.Filter
	start time.Time
	epoch uint64
	blob  *blobloom.SyncFilter
	bits  *lockedBits

	hits, misses      []byte // pool keys of klen bytes, flat
	hitHash, missHash []uint64
	fpr               float64 // fraction of the miss pool reported seen
	bytes             uint64

	rotMu    sync.Mutex
	next     atomic.Uint64 // next fresh key index
	genStart atomic.Uint64 // fresh index at which the current generation (or refill) began
}

var fixtures sync.Map // fixtureID → *fixture

func getFixture(tb testing.TB, id fixtureID) *fixture {
	v, _ := fixtures.LoadOrStore(id, &fixture{id: id})
	fx := v.(*fixture)
	fx.once.Do(func() {
		if b, ok := tb.(*testing.B); ok {
			b.StopTimer()
			defer b.StartTimer()
		}
		t0 := time.Now()
		fx.build(tb)
		tb.Logf("built %+v in %v (%d MiB)", id, time.Since(t0).Round(time.Millisecond), fx.bytes>>20)
	})
	if fx.win == nil && fx.blob == nil && fx.bits == nil {
		tb.Fatalf("fixture %+v failed to build", id)
	}
	return fx
}

func (fx *fixture) build(tb testing.TB) {
	id := fx.id
	fx.fill(tb)
	if id.add {
		return
	}
	r := rand.New(rand.NewPCG(8, math.Float64bits(id.p)))
	fx.hits = make([]byte, pool*id.klen)
	fx.misses = make([]byte, pool*id.klen)
	fx.hitHash = make([]uint64, pool)
	fx.missHash = make([]uint64, pool)
	hb, mb := newKeyBuf(nsInserted, id.klen), newKeyBuf(nsAbsent, id.klen)
	var fp int
	for i := range pool {
		putKeyIndex(hb, r.Uint64N(totalKeys))
		putKeyIndex(mb, uint64(i))
		copy(fx.hits[i*id.klen:], hb)
		copy(fx.misses[i*id.klen:], mb)
		fx.hitHash[i] = hashKey(hb)
		fx.missHash[i] = hashKey(mb)
		if !fx.testKey(hb) {
			tb.Fatalf("%+v: inserted key %x not found", id, hb)
		}
		if fx.testKey(mb) {
			fp++
		}
	}
	fx.fpr = float64(fp) / pool
}

// fill builds the filter at design load: all totalKeys keys, or totalKeys-genCapacity for an
// add fixture (for the window: 7 full generations and an empty current one).
func (fx *fixture) fill(tb testing.TB) {
	id := fx.id
	n := uint64(totalKeys)
	if id.add {
		n -= genCapacity
	}
	buf := newKeyBuf(nsInserted, id.klen)
	switch id.impl {
	case "window", "windowsw":
		fx.start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		start := fx.start
		f, err := window.New(window.Config{Generations: generations, Interval: interval, Capacity: genCapacity,
			FalsePositiveRate: id.p, SingleWriter: id.impl == "windowsw", Clock: func() time.Time { return start }})
		if err != nil {
			tb.Fatal(err)
		}
		for i := range n {
			if i > 0 && i%genCapacity == 0 {
				fx.epoch++
				f.AdvanceTo(start.Add(time.Duration(fx.epoch) * interval))
			}
			putKeyIndex(buf, i)
			f.TestAndAdd(buf)
		}
		if id.add {
			fx.epoch++
			f.AdvanceTo(start.Add(time.Duration(fx.epoch) * interval))
		}
		// Design load is Capacity keys per generation: stage 0 alone must hold them, and the
		// memory is what kdedup_filter_capacity_bytes reports.
		st := f.Stats()
		if st.Stages != 0 {
			tb.Fatalf("%+v: %d grown stages at design load: the comparison would not measure stage 0", id, st.Stages)
		}
		fx.win, fx.bytes = f, st.TotalBytes
	case "blobloom":
		f := blobloom.NewSyncOptimized(blobloom.Config{Capacity: totalKeys, FPRate: id.p})
		for i := range n {
			putKeyIndex(buf, i)
			f.Add(hashKey(buf))
		}
		fx.blob = f
		nbits, _ := blobloom.Optimize(blobloom.Config{Capacity: totalKeys, FPRate: id.p})
		fx.bytes = nbits / 8
	case "bitsbloom":
		f := bloom.NewWithEstimates(totalKeys, id.p)
		for i := range n {
			putKeyIndex(buf, i)
			f.Add(buf)
		}
		fx.bits, fx.bytes = &lockedBits{f: f}, uint64(f.Cap()/8)
	default:
		tb.Fatalf("unknown implementation %q", id.impl)
	}
}

func (fx *fixture) testKey(k []byte) bool {
	switch {
	case fx.win != nil:
		return fx.win.Test(k)
	case fx.blob != nil:
		return fx.blob.Has(hashKey(k))
	default:
		fx.bits.mu.Lock()
		defer fx.bits.mu.Unlock()
		return fx.bits.f.Test(k)
	}
}

// rotate makes room for genCapacity fresh keys again: the window starts a new generation (the
// oldest expires); the single filters are rebuilt at totalKeys-genCapacity keys. The caller holds
// rotMu.
func (fx *fixture) rotate(tb testing.TB, from uint64) {
	if fx.win != nil {
		fx.epoch++
		fx.win.AdvanceTo(fx.start.Add(time.Duration(fx.epoch) * interval))
	} else {
		fx.blob, fx.bits = nil, nil
		fx.fill(tb)
	}
	fx.genStart.Store(from)
}

// prepareAdd makes room for a run of n fresh keys before the timer starts and returns the first
// index the run uses. A run longer than genCapacity overfills the single filters (and makes the
// window rotate inside the timed loop); keep -benchtime at most 1250000x.
func (fx *fixture) prepareAdd(b *testing.B, n int) uint64 {
	first := fx.next.Load()
	slack := uint64(addBatch * (runtime.GOMAXPROCS(0) + 1))
	if first+uint64(n)+slack > fx.genStart.Load()+genCapacity {
		fx.rotMu.Lock()
		fx.rotate(b, first)
		fx.rotMu.Unlock()
	}
	if uint64(n)+slack > genCapacity {
		b.Logf("%d operations exceed the %d fresh keys the fixture has room for", n, genCapacity)
	}
	return first
}

// rotateIfFull rotates the window inside the timed loop when a run is longer than genCapacity.
func (fx *fixture) rotateIfFull(end uint64) {
	if fx.win == nil || end <= fx.genStart.Load()+genCapacity {
		return
	}
	fx.rotMu.Lock()
	defer fx.rotMu.Unlock()
	if end > fx.genStart.Load()+genCapacity {
		fx.epoch++
		fx.win.AdvanceTo(fx.start.Add(time.Duration(fx.epoch) * interval))
		fx.genStart.Store(end - addBatch)
	}
}

// cursor hands out fresh key indices in batches, so that goroutines do not share a counter per
// operation.
type cursor struct {
	fx     *fixture
	i, end uint64
}

func (c *cursor) next() uint64 {
	if c.i == c.end {
		c.i = c.fx.next.Add(addBatch) - addBatch
		c.end = c.i + addBatch
		c.fx.rotateIfFull(c.end)
	}
	v := c.i
	c.i++
	return v
}

// cpuClock measures the process's CPU time (user+sys) over a timed region: on this shared
// machine it is less sensitive than wall time to being descheduled.
type cpuClock struct{ t0 time.Duration }

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuClock { return cpuClock{cpuNow()} }

func (c cpuClock) report(b *testing.B) {
	b.ReportMetric(float64(cpuNow()-c.t0)/float64(b.N), "cpu-ns/op")
}

func fprName(p float64) string { return fmt.Sprintf("p=%.0e", p) }
