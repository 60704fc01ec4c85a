package consumer_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka"
)

// slowRevoker is a mapDeduper whose Revoke takes revokeTime, like saving large filters to a slow
// object store.
type slowRevoker struct {
	*mapDeduper
	revokeTime time.Duration
}

func (d slowRevoker) Revoke(ctx context.Context, p int32) error {
	select {
	case <-time.After(d.revokeTime):
	case <-ctx.Done():
	}
	return d.mapDeduper.Revoke(ctx, p)
}

// memberLog records, from a worker's log, the member ID of each generation it started and how
// often it could not join.
type memberLog struct {
	mu      sync.Mutex
	members map[int64]string
	noJoin  int
}

func (m *memberLog) Enabled(context.Context, slog.Level) bool { return true }
func (m *memberLog) WithAttrs([]slog.Attr) slog.Handler       { return m }
func (m *memberLog) WithGroup(string) slog.Handler            { return m }
func (m *memberLog) Handle(ctx context.Context, r slog.Record) error {
	m.mu.Lock()
	switch {
	case r.Message == "generation started":
		var gen int64
		var member string
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "generation":
				gen = a.Value.Int64()
			case "member":
				member = a.Value.String()
			}
			return true
		})
		if m.members == nil {
			m.members = map[int64]string{}
		}
		m.members[gen] = member
	case strings.HasPrefix(r.Message, "consumer group: cannot join"):
		m.noJoin++
	}
	m.mu.Unlock()
	return testLog.Handler().Handle(ctx, r)
}

// TestSlowReleaseKeepsMembership: a worker whose partitions take longer to release than the
// session timeout (kafka-go stops heartbeating when a generation ends) stays a member of the
// group, because the Worker heartbeats during the release: a second worker joins, and the first
// keeps its member ID instead of being removed and rejoining. Under the eager protocol the join
// is one rebalance in which A releases all 4 partitions; under the cooperative one it is two, and
// A releases the 2 that move, at the start of the first.
func TestSlowReleaseKeepsMembership(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		proto          consumer.GroupProtocol
		released, gens int
	}{{consumer.GroupEager, 4, 2}, {consumer.GroupCooperative, 2, 3}} {
		t.Run(string(tc.proto), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 4, 4, embedkafka.Options{})
			cfg := e.config()
			cfg.GroupProtocol = tc.proto
			cfg.SessionTimeout, cfg.HeartbeatInterval, cfg.RebalanceTimeout = time.Second, 100*time.Millisecond, 8*time.Second
			st := newStore()
			logA := &memberLog{}
			a := e.startLogged(cfg, slowRevoker{newMapDeduper(false, st), 2500 * time.Millisecond}, keyFuncFor(t, "key"), slog.New(logA))
			eventually(t, 20*time.Second, "worker A ready with every partition", func() bool { return a.w.Ready() && a.obs.assigned.Load() == 4 })
			b := e.start(cfg, newMapDeduper(false, st), keyFuncFor(t, "key"))
			eventually(t, 30*time.Second, "A released its partitions, and both workers share them", func() bool {
				na, nb := a.obs.assigned.Load(), b.obs.assigned.Load()
				return a.obs.released.Load() >= int64(tc.released) && a.w.Ready() && b.w.Ready() && na > 0 && nb > 0 && na+nb == 4
			})
			if r := a.obs.releaseMax.Load(); time.Duration(r) < 2*cfg.SessionTimeout {
				t.Fatalf("A's longest release took %v, want more than twice the session timeout for the test to mean anything", time.Duration(r))
			}
			logA.mu.Lock()
			defer logA.mu.Unlock()
			ids := map[string]bool{}
			for _, m := range logA.members {
				ids[m] = true
			}
			if len(logA.members) != tc.gens || len(ids) != 1 || logA.noJoin != 0 {
				t.Errorf("A started generations %v and could not join %d times; want %d generations as one member, no failed join",
					logA.members, logA.noJoin, tc.gens)
			}
		})
	}
}
