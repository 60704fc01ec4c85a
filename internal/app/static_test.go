package app

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
)

// TestRestartPauseStatic restarts one of two replicas (SIGTERM, then the same replica started
// again, as a rolling update does) once with dynamic and once with static group membership
// (KAFKA_GROUP_INSTANCE_ID), and logs the output pause of every partition for both. It proves
// that neither loses or leaks a record, and that with static membership the replica that stayed
// is not disturbed: the restarted replica rejoins the generation it left, with its partitions,
// and no rebalance happens.
func TestRestartPauseStatic(t *testing.T) {
	t.Parallel()
	for _, static := range []bool{false, true} {
		name := map[bool]string{false: "dynamic", true: "static"}[static]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cl := testbroker.Start(t, testbroker.Fake, testbroker.Options{Topics: map[string]int32{"in": scalePartitions, "out": scalePartitions}})
			base := restartEnviron(cl, t.TempDir(), "partition")
			base["CHECKPOINT_INTERVAL"] = "500ms"
			// A session long enough for a restart to come back within it, as in production.
			base["KAFKA_SESSION_TIMEOUT"], base["KAFKA_HEARTBEAT_INTERVAL"], base["KAFKA_REBALANCE_TIMEOUT"] = "10s", "500ms", "10s"
			r := &scaleRun{t: t, cl: cl, variant: sharedDir, base: base, dirs: map[string]string{}, workers: map[string]*worker{}}
			start := func(n string) *worker {
				e := r.environ(n)
				if static {
					e["KAFKA_GROUP_INSTANCE_ID"] = n
				}
				w := startWorker(t, e)
				r.workers[n] = w
				return w
			}
			r.began = time.Now()
			stream := &scaleStream{rng: rand.New(rand.NewPCG(restartSeed(t), 0x737461746963)), dupRate: 0.3, unique: map[string]bool{}}
			stop, produced := make(chan struct{}), make(chan error, 1)
			r.mon = startStallMonitor(cl)
			go produceUntil(cl, stream, 40, 25*time.Millisecond, stop, produced)

			w1, w2 := start("w1"), start("w2")
			g0 := r.inGeneration(w1, "w1 and w2 share the partitions", "w1", "w2")
			r.progress(w1, 1000, "w1 and w2 consume")
			r.mon.setPhase("restart")
			w1.signal(t, syscall.SIGTERM)
			if code := w1.wait(t, 20*time.Second); code != 0 {
				t.Errorf("w1: exit status %d after SIGTERM, want 0; log:\n%s", code, tail(w1.stderr.String(), 30))
			}
			w1b := start("w1")
			g1 := r.inGeneration(w1b, "w1 came back", "w1", "w2")
			r.progress(w1b, 1000, "w1 back")
			r.mon.setPhase("end")
			close(stop)
			if err := <-produced; err != nil {
				t.Fatalf("producing: %v", err)
			}
			waitFor(t, w1b, 60*time.Second, "the group to catch up", func() bool { return caughtUp(cl) })
			for _, w := range []*worker{w1b, w2} {
				w.signal(t, syscall.SIGTERM)
				if code := w.wait(t, 20*time.Second); code != 0 {
					t.Errorf("exit status %d after SIGTERM, want 0; log:\n%s", code, tail(w.stderr.String(), 30))
				}
			}
			stalls := r.mon.finish()["restart"]
			out := checkOutput(t, cl, stream.unique)
			var longest, sum time.Duration
			for _, g := range stalls {
				longest, sum = max(longest, g), sum+g
			}
			mean := time.Duration(0)
			if len(stalls) > 0 {
				mean = sum / time.Duration(len(stalls))
			}
			t.Logf("%s membership: restart of one of two replicas: generation %d -> %d; output pause of the %d partitions that paused: mean %v, max %v (all: %v); %d leaked, %d lost",
				name, g0, g1, len(stalls), mean.Round(time.Millisecond), longest.Round(time.Millisecond), roundAll(stalls), out.leaked, out.lost)
			if out.leaked != 0 || out.lost != 0 {
				t.Errorf("%d leaked, %d lost", out.leaked, out.lost)
			}
			if static && g1 != g0 {
				t.Errorf("a static replica's restart started generation %d after %d: want no rebalance", g1, g0)
			}
		})
	}
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
