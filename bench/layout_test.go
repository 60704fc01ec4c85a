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

// BenchmarkLayout prototypes ways to lay out and test window.Filter's blocks (N=8, 1.25M keys per
// generation, 8 full generations, 63 data bits per word), to tell which layout and which
// membership test pay. It is a replica, not the window package: it never touches Filter, its bit
// patterns are its own (uniform positions), and it has no tags to check (a swept filter has none
// either). The variants up to onegen are the first sectorized layout, a key's K bits spread evenly over S
// sectors, with the parameters window.Size gave before the interleaved layout (oldLayouts); interleaved is the
// interleaved layout, with the parameters window.Size gives now.
//
//	sector-major: window before #20: a group stores the first sectors of all N slots side by side,
//	              then the second sectors; a miss reads N adjacent lines
//	slot-major:   a group stores each slot's S sectors side by side; a miss reads every S-th line
//	transposed:   the first sectors are stored word-major: word w of every slot's first sector side
//	              by side (for N=8 one line holds word w of all 8 generations), the other sectors
//	              sector-major; a miss reads only the lines of the words its first-sector mask
//	              uses (about 4.4 of 8 at K/S=6), for all generations at once
//	touch:        sector-major, loading one word of every first sector before testing any, so that
//	              all N cache misses are in flight at once
//	probeonly:    only the hash-to-mask computation, no memory read (the floor of every variant)
//	onegen:       sector-major, the newest generation's first sector only (what one line costs;
//	              not a valid test)
//	interleaved:  window since #20: a key sets FirstBits bits in one word of sector 0 and spreads
//	              the rest over sectors 1 … S-1; sector 0 is stored word-major, so a miss reads
//	              the one line that holds the key's word of all 8 generations
//
// op=miss probes keys never added; op=hit probes added keys (uniform over the generations).
func BenchmarkLayout(b *testing.B) {
	for _, p := range fprs {
		for _, order := range []string{"sector-major", "slot-major", "transposed", "interleaved"} {
			lay := getLayout(b, p, order)
			variants := []string{order}
			if order == "sector-major" {
				variants = append(variants, "touch", "probeonly", "onegen")
			}
			for _, op := range []string{"miss", "hit"} {
				hs := lay.miss
				if op == "hit" {
					hs = lay.hit
				}
				for _, v := range variants {
					b.Run(fmt.Sprintf("op=%s/%s/v=%s", op, fprName(p), v), func(b *testing.B) {
						benchLayout(b, lay.variant(v), hs)
					})
				}
			}
		}
	}
}

func benchLayout(b *testing.B, test func(uint64) bool, hs []uint64) {
	b.ReportAllocs()
	c := startCPU()
	n, j := 0, 0
	for range b.N {
		if test(hs[j]) {
			n++
		}
		j = (j + 1) & (pool - 1)
	}
	c.report(b)
	sink.Add(int64(n))
}

type layout struct {
	words     []uint64
	groups    uint64
	slots     int
	sectors   int
	k         int
	first     int // interleaved: bits in one word of sector 0
	order     string
	active    []int // newest first
	hit, miss []uint64
}

var layouts sync.Map // [2]any{p, order} → *layout

func getLayout(b *testing.B, p float64, order string) *layout {
	id := [2]any{p, order}
	if v, ok := layouts.Load(id); ok {
		return v.(*layout)
	}
	s, ok := oldLayouts[p]
	if order == "interleaved" || !ok {
		var err error
		s, err = window.Size(window.Config{Generations: generations, Interval: time.Minute, Capacity: genCapacity, FalsePositiveRate: p})
		if err != nil {
			b.Fatal(err)
		}
	}
	n := s.Groups * uint64(generations*s.Sectors) * 8
	buf := make([]uint64, n+8)
	off := (64 - uintptr(unsafe.Pointer(&buf[0]))%64) % 64 / 8
	l := &layout{words: buf[off : off+uintptr(n)], groups: s.Groups, slots: generations, sectors: s.Sectors, k: s.K,
		first: s.FirstBits, order: order}
	for g := generations - 1; g >= 0; g-- {
		l.active = append(l.active, g)
	}
	kb := newKeyBuf(nsInserted, 16)
	for g := range generations {
		for i := range uint64(genCapacity) {
			putKeyIndex(kb, uint64(g)*genCapacity+i)
			l.add(hashKey(kb), g)
		}
	}
	r := rand.New(rand.NewPCG(9, 9))
	mb := newKeyBuf(nsAbsent, 16)
	l.hit, l.miss = make([]uint64, pool), make([]uint64, pool)
	for i := range pool {
		putKeyIndex(kb, r.Uint64N(totalKeys))
		putKeyIndex(mb, uint64(i))
		l.hit[i], l.miss[i] = hashKey(kb), hashKey(mb)
		if !l.variant(order)(l.hit[i]) {
			b.Fatal("replica lost an added key")
		}
	}
	layouts.Store(id, l)
	return l
}

// oldLayouts are the parameters window.Size gave before the interleaved layout for N=8, 1.25M keys per
// generation (from the code at commit 9490416).
var oldLayouts = map[float64]window.Sizing{
	1e-3: {Sectors: 2, K: 12, Groups: 24827},
	1e-6: {Sectors: 3, K: 21, Groups: 31607},
}

// probe maps a hash to its group's first word and its masks: K positions split evenly over the
// sectors (any remainder to the last), each a word and one of its 63 data bits, as window did
// before #20; for interleaved, the first bits in the word of sector 0 the first position picks
// and the rest over sectors 1 … S-1.
func (l *layout) probe(h uint64) (base uint64, mask [window.MaxSectors * 8]uint64) {
	if l.first > 0 {
		return l.probeInterleaved(h)
	}
	g, _ := bits.Mul64(h, l.groups)
	z, sec, left := h, 0, l.k/l.sectors
	for i := range l.k {
		if i%4 == 0 {
			z = splitmix(h + uint64(i))
		}
		if left == 0 && sec < l.sectors-1 {
			sec, left = sec+1, l.k/l.sectors
		}
		mask[sec*8+int(z&7)] |= 1 << ((z >> 3 & 8191) * 63 >> 13)
		z >>= 16
		left--
	}
	return g * uint64(l.slots*l.sectors) * 8, mask
}

func (l *layout) probeInterleaved(h uint64) (base uint64, mask [window.MaxSectors * 8]uint64) {
	g, _ := bits.Mul64(h, l.groups)
	z := splitmix(h)
	w0 := z & 7
	for i := range l.first {
		if i%4 == 0 && i > 0 {
			z = splitmix(h + uint64(i))
		}
		mask[w0] |= 1 << ((z >> 3 & 8191) * 63 >> 13)
		z >>= 16
	}
	rest := l.k - l.first
	for i := range rest {
		if i%4 == 0 {
			z = splitmix(h + 64 + uint64(i))
		}
		sec := 1 + i*(l.sectors-1)/rest
		mask[sec*8+int(z&7)] |= 1 << ((z >> 3 & 8191) * 63 >> 13)
		z >>= 16
	}
	return g * uint64(l.slots*l.sectors) * 8, mask
}

func splitmix(x uint64) uint64 {
	z := x + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// sector returns sector sec of slot s in the group at base (not for the transposed first sector).
func (l *layout) sector(base uint64, s, sec int) *[8]uint64 {
	line := sec*l.slots + s
	if l.order == "slot-major" {
		line = s*l.sectors + sec
	}
	i := base + uint64(line)*8
	return (*[8]uint64)(l.words[i : i+8])
}

// word returns word w of sector sec of slot s in the group at base.
func (l *layout) word(base uint64, s, sec, w int) *uint64 {
	if (l.order == "transposed" || l.order == "interleaved") && sec == 0 {
		return &l.words[base+uint64(w*l.slots+s)]
	}
	return &l.sector(base, s, sec)[w]
}

func (l *layout) add(h uint64, slot int) {
	base, mask := l.probe(h)
	for sec := range l.sectors {
		for w := range 8 {
			*l.word(base, slot, sec, w) |= mask[sec*8+w]
		}
	}
}

// variant returns the membership test named v; every variant is called the same way.
func (l *layout) variant(v string) func(uint64) bool {
	switch v {
	case "sector-major", "slot-major":
		return l.testOrder
	case "transposed":
		return l.testTransposed
	case "interleaved":
		return l.testInterleaved
	case "touch":
		return l.testTouch
	case "probeonly":
		return l.testProbeOnly
	case "onegen":
		return l.testOneGen
	}
	panic("unknown variant " + v)
}

func missing(b *[8]uint64, m []uint64) uint64 {
	return m[0]&^b[0] | m[1]&^b[1] | m[2]&^b[2] | m[3]&^b[3] | m[4]&^b[4] | m[5]&^b[5] | m[6]&^b[6] | m[7]&^b[7]
}

func (l *layout) blockHas(base uint64, mask *[window.MaxSectors * 8]uint64, s int) bool {
	for sec := range l.sectors {
		if missing(l.sector(base, s, sec), mask[sec*8:sec*8+8]) != 0 {
			return false
		}
	}
	return true
}

// testTransposed tests the first sectors of all generations through the words the key's
// first-sector mask uses only, then the other sectors of a generation that passes.
func (l *layout) testTransposed(h uint64) bool {
	base, mask := l.probe(h)
	var offs [8]uint64
	var ms [8]uint64
	n := 0
	for w := range 8 {
		if mask[w] != 0 {
			offs[n], ms[n] = base+uint64(w*l.slots), mask[w]
			n++
		}
	}
	for _, s := range l.active {
		var miss uint64
		for j := range n {
			miss |= ms[j] &^ l.words[offs[j]+uint64(s)]
		}
		if miss != 0 {
			continue
		}
		if l.restHas(base, s, &mask) {
			return true
		}
	}
	return false
}

// testInterleaved reads the key's word of sector 0 for every generation from one row, and the
// other sectors of a generation whose word has the first bits.
func (l *layout) testInterleaved(h uint64) bool {
	base, mask := l.probe(h)
	var w0 int
	for w := range 8 {
		if mask[w] != 0 {
			w0 = w
		}
	}
	row := l.words[base+uint64(w0*l.slots):][:l.slots:l.slots]
	m := mask[w0]
	for _, s := range l.active {
		if m&^row[s] != 0 {
			continue
		}
		if l.restHas(base, s, &mask) {
			return true
		}
	}
	return false
}

// restHas reports whether slot s's sectors 1 … S-1 of the group at base have mask's bits.
func (l *layout) restHas(base uint64, s int, mask *[window.MaxSectors * 8]uint64) bool {
	for sec := 1; sec < l.sectors; sec++ {
		if missing(l.sector(base, s, sec), mask[sec*8:sec*8+8]) != 0 {
			return false
		}
	}
	return true
}

func (l *layout) testOrder(h uint64) bool {
	base, mask := l.probe(h)
	return l.anyHas(base, &mask)
}

func (l *layout) anyHas(base uint64, mask *[window.MaxSectors * 8]uint64) bool {
	for _, s := range l.active {
		if l.blockHas(base, mask, s) {
			return true
		}
	}
	return false
}

// touchSink keeps testTouch's loads from being dropped (one goroutine runs the benchmarks).
var touchSink uint64

func (l *layout) testTouch(h uint64) bool {
	base, mask := l.probe(h)
	var t uint64
	for _, s := range l.active {
		t |= l.sector(base, s, 0)[0]
	}
	touchSink = t
	return l.anyHas(base, &mask)
}

func (l *layout) testProbeOnly(h uint64) bool {
	base, mask := l.probe(h)
	return base == 1 && mask[0]|mask[7] == 0
}

func (l *layout) testOneGen(h uint64) bool {
	base, mask := l.probe(h)
	return missing(l.sector(base, l.active[0], 0), mask[:8]) == 0
}
