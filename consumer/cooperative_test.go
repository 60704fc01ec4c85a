package consumer_test

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka"
)

// TestCooperativeScaleOut runs two workers, then a third, on kfake with 12 partitions, with each
// group protocol. Under the cooperative one the two old workers keep the partitions that stay
// with them through both rebalances of the join: no Revoke and no new Assign for them (the
// Deduper sees them listed again by Generation), and they revoke exactly the partitions the
// newcomer gets. Under the eager one, the baseline, every partition of the old workers is
// revoked and assigned again. Every worker's Deduper checks the Deduper contract.
func TestCooperativeScaleOut(t *testing.T) {
	t.Parallel()
	for _, proto := range []consumer.GroupProtocol{consumer.GroupCooperative, consumer.GroupEager} {
		t.Run(string(proto), func(t *testing.T) {
			t.Parallel()
			const parts = 12
			e := newEnv(t, parts, parts, embedkafka.Options{})
			cfg := e.config()
			cfg.GroupProtocol = proto
			logs := []*genLog{{}, {}, {}}
			st := newStore()
			var ds []*mapDeduper
			var workers []*running
			start := func(i int) {
				d := newMapDeduper(false, st)
				d.eager = proto == consumer.GroupEager
				ds = append(ds, d)
				workers = append(workers, e.startLogged(cfg, d, keyFuncFor(t, "key"), slog.New(logs[i])))
			}
			start(0)
			start(1)
			g2 := waitSettled(t, logs[:2], parts, 30*time.Second, "two workers sharing the partitions")
			before := generations(logs)[g2]
			eventually(t, 30*time.Second, "the partitions assigned", func() bool {
				return ds[0].assigned(before[0]) && ds[1].assigned(before[1])
			})
			var assigned, revoked [2]map[int32]int // counts at g2
			for i := range 2 {
				assigned[i], revoked[i], _ = ds[i].counts()
			}
			start(2)
			g3 := waitSettled(t, logs, parts, 30*time.Second, "three workers sharing the partitions")
			after := generations(logs)[g3]
			eventually(t, 30*time.Second, "the partitions assigned", func() bool {
				return ds[0].assigned(after[0]) && ds[1].assigned(after[1]) && ds[2].assigned(after[2])
			})
			t.Logf("%s: generation %d %v → generation %d %v", proto, g2, before, g3, after)
			for i := range 2 {
				assigns, revokes, discards := ds[i].counts()
				for p, n := range revoked[i] {
					revokes[p] -= n
				}
				kept := 0
				for _, p := range after[i] {
					if !slices.Contains(before[i], p) {
						t.Errorf("worker %d got partition %d, which it did not have: the old workers swapped partitions", i, p)
						continue
					}
					kept++
					again := assigns[int32(p)] - assigned[i][int32(p)]
					switch proto {
					case consumer.GroupCooperative:
						if revokes[int32(p)] != 0 || again != 0 {
							t.Errorf("worker %d: partition %d stayed, but was revoked %d times and assigned again %d times", i, p, revokes[int32(p)], again)
						}
					case consumer.GroupEager:
						if revokes[int32(p)] == 0 || again == 0 {
							t.Errorf("worker %d: eager rebalances did not revoke and assign again partition %d (%d revokes, %d assigns)", i, p, revokes[int32(p)], again)
						}
					}
				}
				lost := len(before[i]) - kept
				n := 0
				for _, c := range revokes {
					n += c
				}
				t.Logf("%s: worker %d kept %d partitions and revoked %d since generation %d", proto, i, kept, n, g2)
				if proto == consumer.GroupCooperative && n != lost {
					t.Errorf("worker %d revoked %d partitions, want the %d it lost: %v", i, n, lost, revokes)
				}
				if len(discards) != 0 {
					t.Errorf("worker %d discarded %v", i, discards)
				}
			}
			for i, r := range workers {
				if err := r.stop(t, 10*time.Second); err != nil {
					t.Errorf("worker %d: %v", i, err)
				}
				ds[i].check(t)
			}
		})
	}
}

// TestCooperativeRollingUpgrade runs a group through a rolling upgrade: a worker offering only
// eager protocols (an older version) with cooperative ones makes every generation eager (each
// Deduper sees nothing assigned at Generation); once it left, the group turns cooperative, and a
// worker joining then finds the others keeping partitions through the rebalance.
func TestCooperativeRollingUpgrade(t *testing.T) {
	t.Parallel()
	const parts = 6
	e := newEnv(t, parts, parts, embedkafka.Options{})
	st := newStore()
	logs := []*genLog{{}, {}, {}, {}}
	ds := make([]*mapDeduper, 4)
	ws := make([]*running, 4)
	start := func(i int, proto consumer.GroupProtocol) {
		cfg := e.config()
		cfg.GroupProtocol = proto
		ds[i] = newMapDeduper(false, st)
		ds[i].eager = true // until the old worker left, every generation must be eager
		ws[i] = e.startLogged(cfg, ds[i], keyFuncFor(t, "key"), slog.New(logs[i]))
	}
	start(0, consumer.GroupCooperative)
	start(1, consumer.GroupEager)
	waitSettled(t, logs[:2], parts, 30*time.Second, "a new and an old worker sharing the partitions")
	start(2, consumer.GroupCooperative)
	waitSettled(t, logs[:3], parts, 30*time.Second, "three workers sharing the partitions")
	if err := ws[1].stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	rest := []*genLog{logs[0], logs[2]}
	waitSettled(t, rest, parts, 30*time.Second, "the new workers sharing the partitions")
	for _, i := range []int{0, 2} {
		ds[i].mu.Lock()
		ds[i].eager = false
		ds[i].mu.Unlock()
	}
	_, _, discards := ds[0].counts()
	start(3, consumer.GroupCooperative)
	waitSettled(t, []*genLog{logs[0], logs[2], logs[3]}, parts, 30*time.Second, "three new workers sharing the partitions")
	kept := 0
	for _, i := range []int{0, 2} {
		ds[i].mu.Lock()
		for _, n := range ds[i].kept {
			kept += n
		}
		ds[i].mu.Unlock()
	}
	if kept == 0 {
		t.Error("no partition was kept through a rebalance once every worker offered the cooperative protocol")
	}
	if _, _, d := ds[0].counts(); len(d) != len(discards) {
		t.Errorf("worker 0 discarded partitions: %v", d)
	}
	for _, i := range []int{0, 2, 3} {
		if err := ws[i].stop(t, 10*time.Second); err != nil {
			t.Errorf("worker %d: %v", i, err)
		}
	}
	for _, d := range ds {
		d.check(t)
	}
}
