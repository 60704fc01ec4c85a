package checkpoint

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint/snapshot"
	"github.com/kdedup/kdedup/checkpoint/snapshot/snapshottest"
	"github.com/kdedup/kdedup/internal/ckpttest"
)

// testHeader returns a valid snapshot header with 64 data words per group: one generation of a
// filter of 8 slots of one 512-bit sector. The store tests need valid snapshots of chosen sizes,
// not any particular filter; the format's own fixtures are in package snapshot.
func testHeader(groups uint64) snapshot.Header {
	const slots = 8
	return snapshot.Header{
		Generations: 1, Interval: time.Minute, Capacity: 1000, FalsePositiveRate: 0.01,
		Seed: 0x9e3779b97f4a7c15, K: 4, FirstBits: 4, SectorBits: 512, Sectors: 1, Groups: groups,
		Slots: slots, SlotUses: make([]uint64, slots), Words: groups * slots * 512 / 64,
		Epoch: 1, Gens: []snapshot.Generation{{Number: 1, Slot: 0}},
		Scope: snapshot.ScopePartition, Topic: "orders", Partition: 3,
		Created: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	}
}

// encodeSnap returns a write function encoding a snapshot of testHeader(groups) whose words come
// from wordSeed, and the words.
func encodeSnap(groups, wordSeed uint64) (func(io.Writer) error, []uint64) {
	h := testHeader(groups)
	words := ckpttest.Words(h.Words, wordSeed)
	return func(w io.Writer) error {
		return snapshottest.Encode(w, h, func(w io.Writer) error { return snapshottest.WriteWords(w, words) })
	}, words
}

func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

func readAll(t *testing.T, s *Store, info Info) string {
	t.Helper()
	rc, err := s.Open(context.Background(), info)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// verify decodes a whole snapshot and checks its checksums.
func verify(r io.Reader) error {
	d := snapshot.NewDecoderSize(r, -1)
	if _, err := d.Header(); err != nil {
		return err
	}
	return d.Verify()
}

// newMemStore returns a Store over a fresh MemBackend.
func newMemStore(keep int) (*Store, *MemBackend) {
	b := NewMemBackend()
	return NewStore(b, keep), b
}
