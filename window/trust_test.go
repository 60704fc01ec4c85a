package window

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
	"time"
)

// trustSnapshot returns a filter's snapshot (meta and data) after keys keys were added in each of
// its three generations, and the clock it was taken at.
func trustSnapshot(t *testing.T, cfg Config, keys uint64) (Meta, []byte, time.Time) {
	t.Helper()
	clock := newFakeClock()
	start := clock.Now()
	cfg.Clock = clock.Now
	f := mustNew(t, cfg)
	for g := range uint64(3) {
		clock.Set(start.Add(time.Duration(g) * cfg.Interval))
		f.AdvanceTo(clock.Now())
		for i := range keys {
			f.TestAndAdd(key(30+g, i))
		}
	}
	var buf bytes.Buffer
	m, _, err := f.WriteSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return m, buf.Bytes(), clock.Now()
}

// allOnes returns data with every data bit of every word set, each word keeping its use tag.
func allOnes(data []byte) []byte {
	out := bytes.Clone(data)
	for i := 0; i+8 <= len(out); i += 8 {
		w := binary.LittleEndian.Uint64(out[i:])
		binary.LittleEndian.PutUint64(out[i:], w&tagBit|dataMask)
	}
	return out
}

// future moves m's generations ahead by d intervals, as a crafted manifest would.
func future(m Meta, d uint64) Meta {
	m.Epoch += d
	m.SlotEpochs = append([]int64(nil), m.SlotEpochs...)
	for i, e := range m.SlotEpochs {
		if e >= 0 {
			m.SlotEpochs[i] = e + int64(d)
		}
	}
	return m
}

// TestRestoreRefusesCraftedSnapshots proves that Restore refuses, as ErrImplausible with its
// reason, a snapshot whose generations are all ones (every new identity would be a duplicate),
// whose epoch lies in the future (its generations would never expire), or both, while an honest
// snapshot, and one a little ahead of the clock (skew), restore.
func TestRestoreRefusesCraftedSnapshots(t *testing.T) {
	cfg := Config{Generations: 3, Interval: time.Minute, Capacity: 10_000, FalsePositiveRate: 1e-6, Seed: 7}
	m, data, now := trustSnapshot(t, cfg, 5000)
	year := uint64(365 * 24 * 60)
	for _, tc := range []struct {
		name   string
		m      Meta
		data   []byte
		clock  time.Time
		reason string
	}{
		{"honest", m, data, now, ""},
		{"honest, restored later", m, data, now.Add(time.Hour), ""},
		{"clock behind by the skew", m, data, now.Add(-MaxClockSkew), ""},
		{"all ones, future epoch", future(m, year), allOnes(data), now, ImplausibleFuture},
		{"all ones", m, allOnes(data), now, ImplausibleFill},
		{"future epoch", future(m, 10), data, now, ImplausibleFuture}, // 10 minutes: past one interval and the skew
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := cfg
			rc.Clock = func() time.Time { return tc.clock }
			rc.WallClock = rc.Clock
			f, err := Restore(rc, tc.m, bytes.NewReader(tc.data))
			var ie *ImplausibleError
			switch {
			case tc.reason == "" && err != nil:
				t.Fatalf("Restore: %v", err)
			case tc.reason == "":
				for i := range uint64(100) {
					if f.Test(key(99, i)) {
						t.Fatalf("a new identity is judged a duplicate")
					}
				}
			case !errors.Is(err, ErrImplausible) || !errors.As(err, &ie) || ie.Reason != tc.reason:
				t.Fatalf("Restore = %v, want ErrImplausible (%s)", err, tc.reason)
			}
		})
	}
}

// TestRestoreRefusesMemoryBeforeAllocating proves that a snapshot claiming grown stages of about
// 2 GiB in all is refused against the filter's cap before anything is allocated for it.
func TestRestoreRefusesMemoryBeforeAllocating(t *testing.T) {
	cfg := Config{Generations: 3, Interval: time.Minute, Capacity: 10_000, FalsePositiveRate: 1e-6, Seed: 7, MaxBytes: 37 << 20}
	m, data, now := trustSnapshot(t, cfg, 100)
	s, err := Size(cfg)
	if err != nil {
		t.Fatal(err)
	}
	shardBits := shardLayout(s.GrowAt)
	m.ShardBits = int(shardBits)
	for i := 1; snapshotBytes(cfg, s, m) < 2<<30; i++ {
		lay := growthStage(cfg.Capacity, s.ShareFPR, i, shardBits)
		m.Stages = append(m.Stages, StageMeta{Epoch: m.Epoch, Index: i, Groups: lay.groups, K: lay.layout.k,
			FirstBits: lay.layout.first, Sectors: lay.layout.sectors, Counts: make([]uint64, 1<<shardBits),
			Words: lay.groups * uint64(lay.layout.sectors) * sectorWords})
	}
	t.Logf("%d stages claim %d MiB", len(m.Stages), snapshotBytes(cfg, s, m)>>20)
	cfg.Clock = func() time.Time { return now }
	cfg.WallClock = cfg.Clock
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = Restore(cfg, m, bytes.NewReader(data))
	runtime.ReadMemStats(&after)
	var ie *ImplausibleError
	if !errors.As(err, &ie) || ie.Reason != ImplausibleMemory {
		t.Fatalf("Restore = %v, want ErrImplausible (memory)", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("Restore allocated %d KiB before refusing", n>>10)
	}
}
