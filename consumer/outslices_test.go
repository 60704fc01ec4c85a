package consumer

import (
	"math"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// TestRecordSlicesBound checks that the worker's free output slices are cleared when given back
// and hold at most maxFreeOutputBytes: after many partitions handled a batch at once, the slices
// past the bound are dropped; and that get returns room for the records asked for, from the
// smallest free slice that has it or a new one.
func TestRecordSlicesBound(t *testing.T) {
	var p recordSlices
	perSlice := int(maxFreeOutputBytes / outRecordSize / 4) // four fit
	var given [][]kafkaio.Record
	for range 10 {
		s := p.get(perSlice)[:perSlice]
		s[0].Value = []byte("v")
		given = append(given, s)
	}
	for _, s := range given {
		p.put(s)
	}
	if len(p.free) != 4 || p.freeBytes != 4*int64(perSlice)*outRecordSize {
		t.Fatalf("%d free slices of %d bytes, want 4 of %d", len(p.free), p.freeBytes, 4*int64(perSlice)*outRecordSize)
	}
	for _, s := range given {
		if s[0].Value != nil {
			t.Fatal("a slice given back keeps a record")
		}
	}
	if s := p.get(perSlice + 1); len(s) != 0 || cap(s) != perSlice+1 || len(p.free) != 4 {
		t.Fatalf("get(%d): len %d cap %d, %d free", perSlice+1, len(s), cap(s), len(p.free))
	}
	if s := p.get(10); len(s) != 0 || cap(s) != perSlice || p.freeBytes != 3*int64(perSlice)*outRecordSize {
		t.Fatalf("get(10): len %d cap %d, free bytes %d", len(s), cap(s), p.freeBytes)
	}
	p.put(make([]kafkaio.Record, 0, 20))
	if s := p.get(10); cap(s) != 20 {
		t.Fatalf("get(10) with a free slice of 20: cap %d, want the smallest that fits", cap(s))
	}
}

// TestEndBatchKeepsOutput checks that a partition whose reader hands out the next batch at once
// keeps its output slice for it, with no record past the batch in hand left from the batch
// before, and gives it back to the worker's pool, cleared whole, once the reader has no more.
func TestEndBatchKeepsOutput(t *testing.T) {
	w := &Worker{}
	st := &partitionState{}
	batch := func(n int) {
		st.out = st.out[:0]
		if st.out == nil {
			st.out = w.outs.get(n)
		}
		for i := range n {
			st.out = append(st.out, kafkaio.Record{Offset: int64(i), Value: []byte("v")})
		}
	}
	held := func(s []kafkaio.Record) (n int) {
		for _, m := range s[:cap(s)] {
			if m.Value != nil {
				n++
			}
		}
		return n
	}
	batch(10)
	first := st.out
	w.endBatch(st, true)
	if len(st.out) != 0 || &st.out[:1][0] != &first[0] {
		t.Fatal("the output slice was not kept for the next batch")
	}
	batch(4)
	w.endBatch(st, true)
	if n := held(st.out); n != 4 {
		t.Fatalf("the kept slice holds %d records after a batch of 4, want 4", n)
	}
	batch(2)
	w.endBatch(st, false)
	if st.out != nil || len(w.outs.free) != 1 || held(first) != 0 {
		t.Fatalf("the output slice was not given back cleared: out %v, %d free, %d records held", st.out, len(w.outs.free), held(first))
	}
}

// TestSinceMilli checks sinceMilli against time.Time.Sub, the reference, for record timestamps
// around now, far in the past and the future, and at the limits of their range.
func TestSinceMilli(t *testing.T) {
	now := time.Date(2026, 11, 28, 3, 17, 0, 123456789, time.UTC)
	for _, ms := range []int64{now.UnixMilli(), now.UnixMilli() - 1, now.UnixMilli() + 1, now.UnixMilli() - 3_600_000,
		0, -1, 1, -62135596800000, 253402300799999, now.UnixMilli() - 146*365*86_400_000, now.UnixMilli() + 146*365*86_400_000,
		math.MinInt64 / 2, math.MaxInt64 / 2, math.MinInt64, math.MaxInt64} {
		ts := time.UnixMilli(ms)
		if got, want := sinceMilli(now.UnixNano(), ts), now.Sub(ts); got != want {
			t.Errorf("record at %d ms: %v, want %v", ms, got, want)
		}
	}
}
