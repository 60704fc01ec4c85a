package bench

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/kdedup/kdedup/window"
)

// BenchmarkLayout prototypes ways to code the membership test over window.Filter's memory layout
// (groups × (N+1) slots × one 512-bit block, N=8, 1.25M keys per generation, 8 full generations,
// the same K, groups and bit patterns as window.Size and doc.go describe), to tell the window's
// author which changes pay. It is a replica, not the window package: it never touches Filter.
//
//	loop:       what filter.go does: per generation, slice the block, loop over 8 words, branch
//	unrolled:   unsafe pointer to the block, 8 words unrolled, no bounds checks, branch per generation
//	branchless: unrolled, all N generations tested, one branch at the end (no early exit on a hit)
//	sparse:     only the words the key's mask touches (a compact list built with the mask)
//	probeonly:  only the hash-to-mask computation, no memory read (the floor of every variant)
//	onegen:     unrolled, newest generation only (what one cache line costs; not a valid test)
//
// op=miss probes keys never added; op=hit probes added keys (uniform over the generations).
func BenchmarkLayout(b *testing.B) {
	for _, p := range fprs {
		lay := getLayout(b, p)
		for _, op := range []string{"miss", "hit"} {
			hs := lay.miss
			if op == "hit" {
				hs = lay.hit
			}
			for _, v := range []string{"loop", "unrolled", "branchless", "sparse", "probeonly", "onegen"} {
				b.Run(fmt.Sprintf("op=%s/%s/v=%s", op, fprName(p), v), func(b *testing.B) {
					b.ReportAllocs()
					c := startCPU()
					test := lay.variant(v)
					n := 0
					j := 0
					for range b.N {
						if test(hs[j]) {
							n++
						}
						j = (j + 1) & (pool - 1)
					}
					c.report(b)
					sink.Add(int64(n))
				})
			}
		}
	}
}

type layout struct {
	words  []uint64
	groups uint64
	slots  int
	k      int
	active []int // newest first
	hit    []uint64
	miss   []uint64
}

var layouts sync.Map // float64 → *layout

func getLayout(b *testing.B, p float64) *layout {
	if v, ok := layouts.Load(p); ok {
		return v.(*layout)
	}
	s, err := window.Size(window.Config{Generations: generations, Interval: time.Minute, Capacity: genCapacity, FalsePositiveRate: p})
	if err != nil {
		b.Fatal(err)
	}
	n := s.Groups * uint64(s.Slots) * 8
	buf := make([]uint64, n+8)
	off := (64 - uintptr(unsafe.Pointer(&buf[0]))%64) % 64 / 8
	l := &layout{words: buf[off : off+uintptr(n)], groups: s.Groups, slots: s.Slots, k: s.K}
	for g := generations - 1; g >= 0; g-- {
		l.active = append(l.active, g)
	}
	kb := newKeyBuf(nsInserted, 16)
	for g := range generations {
		for i := range uint64(genCapacity) {
			putKeyIndex(kb, uint64(g)*genCapacity+i)
			base, mask := l.probe(hashKey(kb))
			blk := l.block(base, g)
			for w := range 8 {
				blk[w] |= mask[w]
			}
		}
	}
	r := rand.New(rand.NewPCG(9, 9))
	mb := newKeyBuf(nsAbsent, 16)
	l.hit, l.miss = make([]uint64, pool), make([]uint64, pool)
	for i := range pool {
		putKeyIndex(kb, r.Uint64N(totalKeys))
		putKeyIndex(mb, uint64(i))
		l.hit[i], l.miss[i] = hashKey(kb), hashKey(mb)
		if !l.testLoop(l.hit[i]) {
			b.Fatal("replica lost an added key")
		}
	}
	layouts.Store(p, l)
	return l
}

// probe maps a hash to its group's first word and its mask, as doc.go describes the window's hashing.
func (l *layout) probe(h uint64) (base uint64, mask [8]uint64) {
	g, _ := bits.Mul64(h, l.groups)
	s := h&(1<<48-1) | 1
	for i := 0; i < l.k; {
		s += 0x9e3779b97f4a7c15
		z := (s ^ s>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		for j := 0; j < 7 && i < l.k; j++ {
			pos := z & 511
			mask[pos>>6] |= 1 << (pos & 63)
			z >>= 9
			i++
		}
	}
	return g * uint64(l.slots) * 8, mask
}

func (l *layout) block(base uint64, slot int) *[8]uint64 {
	i := base + uint64(slot)*8
	return (*[8]uint64)(l.words[i : i+8])
}

// variant returns the membership test named v; every variant is called the same way.
func (l *layout) variant(v string) func(uint64) bool {
	switch v {
	case "loop":
		return l.testLoop
	case "unrolled":
		return l.testUnrolled
	case "branchless":
		return l.testBranchless
	case "sparse":
		return l.testSparse
	case "probeonly":
		return l.testProbeOnly
	case "onegen":
		return l.testOneGen
	}
	panic("unknown variant " + v)
}

func (l *layout) testLoop(h uint64) bool {
	base, mask := l.probe(h)
	for _, s := range l.active {
		blk := l.block(base, s)
		var missing uint64
		for w := range 8 {
			missing |= mask[w] &^ blk[w]
		}
		if missing == 0 {
			return true
		}
	}
	return false
}

func (l *layout) testUnrolled(h uint64) bool {
	base, mask := l.probe(h)
	p := unsafe.Pointer(&l.words[base])
	for _, s := range l.active {
		blk := (*[8]uint64)(unsafe.Add(p, s*64))
		if mask[0]&^blk[0]|mask[1]&^blk[1]|mask[2]&^blk[2]|mask[3]&^blk[3]|
			mask[4]&^blk[4]|mask[5]&^blk[5]|mask[6]&^blk[6]|mask[7]&^blk[7] == 0 {
			return true
		}
	}
	return false
}

func (l *layout) testBranchless(h uint64) bool {
	base, mask := l.probe(h)
	p := unsafe.Pointer(&l.words[base])
	found := 0
	for _, s := range l.active {
		blk := (*[8]uint64)(unsafe.Add(p, s*64))
		m := mask[0]&^blk[0] | mask[1]&^blk[1] | mask[2]&^blk[2] | mask[3]&^blk[3] |
			mask[4]&^blk[4] | mask[5]&^blk[5] | mask[6]&^blk[6] | mask[7]&^blk[7]
		if m == 0 {
			found++
		}
	}
	return found != 0
}

func (l *layout) testSparse(h uint64) bool {
	base, mask := l.probe(h)
	var idx [8]uint8
	var ms [8]uint64
	n := 0
	for w := range 8 {
		if mask[w] != 0 {
			idx[n], ms[n] = uint8(w), mask[w]
			n++
		}
	}
	p := unsafe.Pointer(&l.words[base])
	for _, s := range l.active {
		blk := (*[8]uint64)(unsafe.Add(p, s*64))
		var missing uint64
		for i := range n {
			missing |= ms[i] &^ blk[idx[i]&7]
		}
		if missing == 0 {
			return true
		}
	}
	return false
}

func (l *layout) testProbeOnly(h uint64) bool {
	base, mask := l.probe(h)
	return base == 1 && mask[0]|mask[7] == 0
}

func (l *layout) testOneGen(h uint64) bool {
	base, mask := l.probe(h)
	blk := (*[8]uint64)(unsafe.Add(unsafe.Pointer(&l.words[base]), l.active[0]*64))
	return mask[0]&^blk[0]|mask[1]&^blk[1]|mask[2]&^blk[2]|mask[3]&^blk[3]|
		mask[4]&^blk[4]|mask[5]&^blk[5]|mask[6]&^blk[6]|mask[7]&^blk[7] == 0
}
