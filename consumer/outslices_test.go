package consumer

import (
	"testing"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// TestRecordSlicesBound checks that the worker's free output slices are cleared when given back
// and hold at most maxFreeOutputBytes: after many partitions handled a batch at once, the slices
// past the bound are dropped.
func TestRecordSlicesBound(t *testing.T) {
	var p recordSlices
	perSlice := int(maxFreeOutputBytes / outRecordSize / 4) // four fit
	var given [][]kafkaio.Record
	for range 10 {
		s := append(p.get(), make([]kafkaio.Record, perSlice)...)
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
	if s := p.get(); len(s) != 0 || cap(s) != perSlice || p.freeBytes != 3*int64(perSlice)*outRecordSize {
		t.Fatalf("get: len %d cap %d, free bytes %d", len(s), cap(s), p.freeBytes)
	}
}
