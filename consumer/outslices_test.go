package consumer

import (
	"testing"

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
