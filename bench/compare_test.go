// Package bench compares kdedup's sliding-window filter (window.Filter, N=8 generations of 1.25M
// keys, all full) with two single Bloom filters holding the same 10M keys:
// github.com/greatroar/blobloom's SyncFilter and github.com/bits-and-blooms/bloom/v3 behind a
// sync.Mutex. See README.md for the commands and the results.
package bench

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

// BenchmarkCompare runs the same workload on every implementation. Names are benchstat keys:
//
//	BenchmarkCompare/op=TestMiss/p=1e-03/key=16/par=1/impl=window
//
// op: TestHit (a key of the 10M added), TestMiss (a key never added), TestAndAdd (a fresh key;
// blobloom does Has then Add, bits-and-blooms TestOrAdd under its mutex), and the hash-level
// TestHitHash, TestMissHash, TestAndAddHash on precomputed xxhash64 values (key=hash; blobloom
// only: bits-and-blooms hashes keys itself, and window keeps its hash-level methods to itself,
// where window's own BenchmarkWindow measures them). Key-level ops include hashing: window.Test
// uses its seeded xxhash Digest, blobloom gets xxhash.Sum64 (the same value, one-shot API),
// bits-and-blooms its own murmur3. par=1 is a plain loop, par=P is b.RunParallel with GOMAXPROCS
// goroutines. impl is the innermost level so that the implementations run back to back.
//
// Besides ns/op, every result reports cpu-ns/op (process CPU time per op, robust to being
// descheduled on a shared machine), and misses report fpr, the fraction of the 1<<20 absent keys
// reported seen.
func BenchmarkCompare(b *testing.B) {
	procs := runtime.GOMAXPROCS(0)
	pars := []int{1}
	if procs > 1 {
		pars = append(pars, procs)
	}
	for _, op := range []string{"TestHit", "TestMiss", "TestAndAdd", "TestHitHash", "TestMissHash", "TestAndAddHash"} {
		hashed := strings.HasSuffix(op, "Hash")
		b.Run("op="+op, func(b *testing.B) {
			for _, p := range fprs {
				b.Run(fprName(p), func(b *testing.B) {
					kls := keyLens
					if hashed {
						kls = []int{16}
					}
					for _, klen := range kls {
						kname := fmt.Sprintf("key=%d", klen)
						if hashed {
							kname = "key=hash"
						}
						b.Run(kname, func(b *testing.B) {
							for _, par := range pars {
								b.Run(fmt.Sprintf("par=%d", par), func(b *testing.B) {
									for _, impl := range impls {
										if skipImpl(impl, op, par) {
											continue
										}
										b.Run("impl="+impl, func(b *testing.B) {
											id := fixtureID{impl: impl, p: p, klen: klen, add: strings.HasPrefix(op, "TestAndAdd")}
											runOp(b, getFixture(b, id), op, par > 1)
										})
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

// skipImpl reports whether a benchmark leaves out impl: bits-and-blooms hashes keys itself, so
// it has no hash-level ops; the single-writer window (windowsw) only differs from the shared one
// in TestAndAdd, and only one goroutine may call its TestAndAdd.
func skipImpl(impl, op string, par int) bool {
	switch impl {
	case "bitsbloom", "window":
		return strings.HasSuffix(op, "Hash")
	case "windowsw":
		return !strings.HasPrefix(op, "TestAndAdd") || par > 1 || strings.HasSuffix(op, "Hash")
	}
	return false
}

func runOp(b *testing.B, fx *fixture, op string, par bool) {
	b.ReportAllocs()
	switch op {
	case "TestHit", "TestMiss":
		keys := fx.hits
		if op == "TestMiss" {
			keys = fx.misses
			b.ReportMetric(fx.fpr, "fpr")
		}
		b.ResetTimer()
		c := startCPU()
		if par {
			b.RunParallel(func(pb *testing.PB) { testKeys(fx, keys, poolStart(), pb.Next) })
		} else {
			testKeys(fx, keys, 0, counter(b.N))
		}
		c.report(b)
	case "TestHitHash", "TestMissHash":
		hs := fx.hitHash
		if op == "TestMissHash" {
			hs = fx.missHash
			b.ReportMetric(fx.fpr, "fpr")
		}
		b.ResetTimer()
		c := startCPU()
		if par {
			b.RunParallel(func(pb *testing.PB) { testHashes(fx, hs, poolStart(), pb.Next) })
		} else {
			testHashes(fx, hs, 0, counter(b.N))
		}
		c.report(b)
	case "TestAndAdd":
		fx.prepareAdd(b, b.N)
		var seen atomic.Int64
		b.ResetTimer()
		c := startCPU()
		if par {
			b.RunParallel(func(pb *testing.PB) { seen.Add(addKeys(fx, pb.Next)) })
		} else {
			seen.Add(addKeys(fx, counter(b.N)))
		}
		c.report(b)
		b.StopTimer()
		b.ReportMetric(float64(seen.Load())/float64(b.N), "seen/op")
	case "TestAndAddHash":
		first := fx.prepareAdd(b, b.N)
		hs := make([]uint64, b.N+addBatch*(runtime.GOMAXPROCS(0)+1))
		buf := newKeyBuf(nsFresh, 16)
		for i := range hs {
			putKeyIndex(buf, first+uint64(i))
			hs[i] = hashKey(buf)
		}
		var seen atomic.Int64
		b.ResetTimer()
		c := startCPU()
		if par {
			b.RunParallel(func(pb *testing.PB) { seen.Add(addHashes(fx, first, hs, pb.Next)) })
		} else {
			seen.Add(addHashes(fx, first, hs, counter(b.N)))
		}
		c.report(b)
		b.StopTimer()
		b.ReportMetric(float64(seen.Load())/float64(b.N), "seen/op")
	default:
		b.Fatalf("unknown op %q", op)
	}
}

var goroutineStart atomic.Uint64

// poolStart spreads the goroutines of a parallel run over the key pools.
func poolStart() int { return int(goroutineStart.Add(0x9e3779b1) % pool) }

// counter returns a next function that allows n iterations, the serial twin of testing.PB.Next.
// The loops below call it directly (it inlines for the serial case only through the closure, so
// serial and parallel runs pay one indirect call per op each, the same for every implementation).
func counter(n int) func() bool {
	return func() bool {
		n--
		return n >= 0
	}
}

var sink atomic.Int64

// The loops are written out per implementation so that the filter calls are direct.

func testKeys(fx *fixture, keys []byte, j int, next func() bool) {
	kl, hits := fx.id.klen, 0
	switch {
	case fx.win != nil:
		f := fx.win
		for next() {
			if f.Test(keys[j*kl : j*kl+kl]) {
				hits++
			}
			j = (j + 1) & (pool - 1)
		}
	case fx.blob != nil:
		f := fx.blob
		for next() {
			if f.Has(hashKey(keys[j*kl : j*kl+kl])) {
				hits++
			}
			j = (j + 1) & (pool - 1)
		}
	default:
		f := fx.bits
		for next() {
			f.mu.Lock()
			ok := f.f.Test(keys[j*kl : j*kl+kl])
			f.mu.Unlock()
			if ok {
				hits++
			}
			j = (j + 1) & (pool - 1)
		}
	}
	sink.Add(int64(hits))
}

func testHashes(fx *fixture, hs []uint64, j int, next func() bool) {
	hits := 0
	switch {
	case fx.blob != nil:
		f := fx.blob
		for next() {
			if f.Has(hs[j]) {
				hits++
			}
			j = (j + 1) & (pool - 1)
		}
	}
	sink.Add(int64(hits))
}

func addKeys(fx *fixture, next func() bool) (seen int64) {
	buf := newKeyBuf(nsFresh, fx.id.klen)
	c := cursor{fx: fx}
	switch {
	case fx.win != nil:
		f := fx.win
		for next() {
			putKeyIndex(buf, c.next())
			if f.TestAndAdd(buf) {
				seen++
			}
		}
	case fx.blob != nil:
		f := fx.blob
		for next() {
			putKeyIndex(buf, c.next())
			h := hashKey(buf)
			if f.Has(h) {
				seen++
			} else {
				f.Add(h)
			}
		}
	default:
		f := fx.bits
		for next() {
			putKeyIndex(buf, c.next())
			f.mu.Lock()
			ok := f.f.TestOrAdd(buf)
			f.mu.Unlock()
			if ok {
				seen++
			}
		}
	}
	return seen
}

func addHashes(fx *fixture, first uint64, hs []uint64, next func() bool) (seen int64) {
	c := cursor{fx: fx}
	switch {
	case fx.blob != nil:
		f := fx.blob
		for next() {
			h := hs[c.next()-first]
			if f.Has(h) {
				seen++
			} else {
				f.Add(h)
			}
		}
	}
	return seen
}
