package dedup

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/checkpoint/snapshot/snapshottest"
	"github.com/kdedup/kdedup/window"
)

// trustFilter returns the configuration of a small filter with hash seed seed, on a fixed clock
// (wall clock too, which the restore's plausibility checks read), and an empty filter of it.
func trustFilter(t testing.TB, seed uint64) (window.Config, *window.Filter) {
	t.Helper()
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	cfg := window.Config{Generations: 3, Interval: time.Minute, Capacity: 1_000, FalsePositiveRate: 1e-6, Seed: seed,
		Clock: func() time.Time { return now }, WallClock: func() time.Time { return now }}
	f, err := window.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, f
}

// TestCraftedSnapshotRejected puts in the store, above an honest snapshot, one written as an
// attacker who may write the store would: every generation all ones, the epoch a year ahead, the
// checksums recomputed. The restore rejects it as implausible, counts the reason, falls back to
// the honest snapshot, and judges no new identity a duplicate.
func TestCraftedSnapshotRejected(t *testing.T) {
	ctx := context.Background()
	store, dir := dirStore(t)
	p := NewCheckpointPersister(store, slog.New(slog.DiscardHandler))
	var reasons []string
	p.OnRejected(func(r string) { reasons = append(reasons, r) })
	cfg, f := trustFilter(t, 0)
	for i := range 500 {
		f.TestAndAdd([]byte("key-" + strconv.Itoa(i)))
	}
	const unit = "orders.p0"
	info := SnapshotInfo{Scope: ScopePartition, Topic: "orders", Partition: 0, InputOffsets: map[int32]int64{0: 500}}
	if _, _, err := p.Save(ctx, unit, f, info, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	m := f.Meta()
	year := uint64(365 * 24 * 60)
	m.Epoch += year
	for i, e := range m.SlotEpochs {
		if e >= 0 {
			m.SlotEpochs[i] = e + int64(year)
		}
	}
	ones := allOnes(m)
	attacker, err := checkpoint.NewDirBackend(dir)
	if err != nil {
		t.Fatal(err)
	}
	putSnapshot(t, store, attacker, unit, func(w io.Writer) error {
		return snapshottest.Encode(w, headerFromMeta(m, info), func(w io.Writer) error { _, err := w.Write(ones); return err })
	})
	r, res, err := p.Restore(ctx, unit, cfg)
	if err != nil || r == nil || res.Outcome != checkpoint.OutcomeFallback {
		t.Fatalf("Restore: filter %v, outcome %q, %v; want a fallback to the honest snapshot", r != nil, res.Outcome, err)
	}
	if len(reasons) != 1 || reasons[0] != "implausible_"+window.ImplausibleFuture {
		t.Errorf("rejections counted %v, want one implausible_future", reasons)
	}
	for i := range 1000 {
		if r.Test([]byte("new-" + strconv.Itoa(i))) {
			t.Fatalf("new identity %d judged a duplicate", i)
		}
	}
	for i := range 500 {
		if !r.Test([]byte("key-" + strconv.Itoa(i))) {
			t.Fatalf("key %d of the honest snapshot lost", i)
		}
	}
}

// TestSeedFingerprintRestore saves a manifest under one hash seed and restores it under another:
// the manifest holds only the seed's fingerprint, the restore refuses it as incompatible (counted,
// and logged without the seed) and starts cold; under the seed it was written with it is warm.
func TestSeedFingerprintRestore(t *testing.T) {
	ctx := context.Background()
	p, store := dirPersister(t)
	var reasons []string
	p.OnRejected(func(r string) { reasons = append(reasons, r) })
	const seed = 0x5eed5eed5eed5eed
	cfg, f := trustFilter(t, seed)
	f.TestAndAdd([]byte("key"))
	const unit = "orders.p0"
	info := SnapshotInfo{Scope: ScopePartition, Topic: "orders", Partition: 0, InputOffsets: map[int32]int64{0: 1}}
	if _, _, err := p.Save(ctx, unit, f, info, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	snaps, err := store.List(ctx, unit)
	if err != nil || len(snaps) != 1 {
		t.Fatalf("List: %v, %v", snaps, err)
	}
	rc, err := store.Open(ctx, snaps[0])
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || bytes.Contains(raw, binary.LittleEndian.AppendUint64(nil, seed)) {
		t.Fatalf("the manifest holds the seed (read error %v)", err)
	}
	other := cfg
	other.Seed = seed + 1
	r, res, err := p.Restore(ctx, unit, other)
	if err != nil || r != nil || res.Outcome != checkpoint.OutcomeCold {
		t.Fatalf("Restore under another seed: filter %v, outcome %q, %v; want cold", r != nil, res.Outcome, err)
	}
	if len(reasons) != 1 || reasons[0] != RejectIncompatible {
		t.Errorf("rejections counted %v, want one %s", reasons, RejectIncompatible)
	}
	r, res, err = p.Restore(ctx, unit, cfg)
	if err != nil || r == nil || res.Outcome != checkpoint.OutcomeWarm || !r.Test([]byte("key")) {
		t.Fatalf("Restore under the seed: filter %v, outcome %q, %v; want warm with its key", r != nil, res.Outcome, err)
	}
}

// allOnes returns the data of a single-file snapshot of m in which every generation has every
// bit set: each word of stage 0 carries the use tag of its slot (where the slots' words lie is
// the version 5 layout documented on snapshot.Decoder: sector 0 of every group word-major, the
// other sectors slot by slot), and each word of a grown stage is all ones but its top bit, which
// a stage leaves untagged.
func allOnes(m window.Meta) []byte {
	sectorWords := m.SectorBits / 64
	perSector := m.Slots * sectorWords
	var b []byte
	for x := range m.Words {
		k := int(x % uint64(m.Sectors*perSector))
		slot := k % perSector / sectorWords
		if k < perSector {
			slot = k % m.Slots
		}
		b = binary.LittleEndian.AppendUint64(b, m.SlotUses[slot]<<63|(1<<63-1))
	}
	for _, st := range m.Stages {
		for range st.Words {
			b = binary.LittleEndian.AppendUint64(b, 1<<63-1)
		}
	}
	return b
}

// TestSingleFileData: singleFileData lays a filter out as a version 5 snapshot holds it, so that
// the filter restored from it knows every key added before.
func TestSingleFileData(t *testing.T) {
	cfg, f := trustFilter(t, 0)
	for i := range 500 {
		f.TestAndAdd([]byte("key-" + strconv.Itoa(i)))
	}
	m, data := singleFileData(t, f)
	r, err := window.Restore(cfg, m, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		if !r.Test([]byte("key-" + strconv.Itoa(i))) {
			t.Fatalf("key-%d lost", i)
		}
	}
}
