package kafkaio

import (
	"testing"
	"time"
)

// TestSlabPoolTrim checks that a slabPool keeps as many slabs as were in use at once during a
// trim period and drops the rest, the largest first.
func TestSlabPoolTrim(t *testing.T) {
	now := time.Unix(0, 0)
	p := &slabPool{now: func() time.Time { return now }, trimmed: now}
	grow := func(s slab, n int) slab {
		s.recs = append(s.recs, make([]Record, n)...)
		s.hdrs = append(s.hdrs, make([]Header, 4*n)...)
		return s
	}
	// Eight batches in hand at once, then given back.
	var held []slab
	for i := range 8 {
		held = append(held, grow(p.take(), 10*(i+1)))
	}
	for _, s := range held {
		p.put(s)
	}
	if got := p.held(); got != 8 {
		t.Fatalf("after 8 batches: %d free slabs, want 8", got)
	}
	for _, s := range held {
		if s.recs[0].Value != nil || s.hdrs[0].Value != nil {
			t.Fatal("put kept an element")
		}
	}
	// The period ends: all eight were in hand at once, so none is dropped.
	now = now.Add(slabTrimEvery)
	p.put(p.take())
	if got := p.held(); got != 8 {
		t.Fatalf("after the first period: %d free slabs, want 8", got)
	}
	// A trim period in which at most two are in hand at once.
	for range 5 {
		a, b := p.take(), p.take()
		p.put(a)
		p.put(b)
	}
	now = now.Add(slabTrimEvery)
	p.put(p.take())
	if got := p.held(); got != 2 {
		t.Fatalf("after a period with 2 in hand: %d free slabs, want 2", got)
	}
	for _, s := range p.free {
		if size(s) > 3*80+4*80 {
			t.Errorf("kept a slab of size %d: the largest should have gone first", size(s))
		}
	}
	// An idle period drops them all.
	now = now.Add(slabTrimEvery)
	p.put(slab{})
	now = now.Add(slabTrimEvery)
	p.put(slab{})
	if got := p.held(); got != 0 {
		t.Fatalf("after idle periods: %d free slabs, want 0", got)
	}
}

// TestSlabPoolInHand checks the count of decoded records in hand: what readers add is over the
// limit past it, what they drop is taken back, and a closed reader counts nothing more.
func TestSlabPoolInHand(t *testing.T) {
	p := newSlabPool(1000)
	var a, b handCount
	a.add(p, 600)
	if p.over(0) || !p.over(401) {
		t.Fatalf("at 600 of 1000: over(0) %v, over(401) %v; want false, true", p.over(0), p.over(401))
	}
	b.add(p, 600)
	if !p.over(0) {
		t.Fatal("at 1200 of 1000: not over")
	}
	a.drop(p, false)
	if p.over(0) || p.inHand.Load() != 600 {
		t.Fatalf("after a dropped its records: %d in hand", p.inHand.Load())
	}
	b.drop(p, true)
	b.add(p, 600) // a Fetch after Close
	if n := p.inHand.Load(); n != 0 {
		t.Fatalf("after b closed: %d in hand, want 0", n)
	}
	if newSlabPool(0).over(1 << 40) {
		t.Fatal("a pool without a limit is over it")
	}
}

// TestSlabPoolBound checks that a pool with a bound on the records in hand keeps free slabs only
// while they and the records in hand fit in it: a slab given back past it is dropped.
func TestSlabPoolBound(t *testing.T) {
	one := slabBytes(slab{recs: make([]Record, 0, 10), hdrs: make([]Header, 0, 40)})
	p := newSlabPool(3 * one)
	var held []slab
	for range 5 {
		s := p.take()
		s.recs, s.hdrs = make([]Record, 10), make([]Header, 40)
		held = append(held, s)
	}
	var h handCount
	h.add(p, one) // one slab's worth of records still in hand elsewhere
	for _, s := range held {
		p.put(s)
	}
	if got := p.held(); got != 2 {
		t.Fatalf("%d free slabs with one slab's worth in hand and a bound of three, want 2", got)
	}
	if p.freeBytes != 2*one {
		t.Fatalf("free bytes %d, want %d", p.freeBytes, 2*one)
	}
	p.take()
	if p.freeBytes != one {
		t.Fatalf("free bytes %d after a take, want %d", p.freeBytes, one)
	}
	h.drop(p, false)
	unbounded := newSlabPool(0)
	for _, s := range held {
		unbounded.put(slab{recs: s.recs[:10], hdrs: s.hdrs[:40]})
	}
	if got := unbounded.held(); got != 5 {
		t.Fatalf("an unbounded pool holds %d of 5 slabs", got)
	}
}
