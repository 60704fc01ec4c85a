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
