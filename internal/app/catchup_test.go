package app

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// TestRebuildAfterCatchUp runs a worker that catches up with an hour of lag, more than the 3
// minutes its window remembers, with no checkpoint store, stops it, and starts another, which
// rebuilds each partition from the output topic; then the records are sent again. Under
// processing time every record the first worker produced was produced within the window, but
// their timestamps (the input's) lie an hour before it. With DEDUP_PROCESSED_HEADER the rebuild
// finds them by the time they were processed and every copy is dropped; without it the rebuild
// finds none and every copy passes: the documented limit.
func TestRebuildAfterCatchUp(t *testing.T) {
	t.Parallel()
	for _, header := range []string{"kdedup-processed", ""} {
		t.Run(fmt.Sprintf("header=%q", header), func(t *testing.T) {
			t.Parallel()
			cl := restartCluster(t)
			environ := restartEnviron(cl, "", "partition")
			environ["DEDUP_PROCESSED_HEADER"] = header
			ctx := context.Background()
			lagged := time.Now().Add(-time.Hour)
			produce := func(from, to int, value string) {
				byPart := make([][]kafkaio.Record, restartPartitions)
				for i := from; i < to; i++ {
					byPart[i%restartPartitions] = append(byPart[i%restartPartitions], kafkaio.Record{
						Key: []byte(fmt.Sprintf("ev-%05d", i)), Value: []byte(value), Time: lagged})
				}
				for p, msgs := range byPart {
					if err := cl.Produce(ctx, "in", p, msgs...); err != nil {
						t.Fatal(err)
					}
				}
			}
			var rebuilt float64
			runOnce := func() {
				w := startWorker(t, environ)
				waitFor(t, w, 30*time.Second, "catch-up", func() bool { return caughtUp(cl) })
				rebuilt += w.metrics(t).value("kdedup_rebuild_records_total")
				w.signal(t, syscall.SIGTERM)
				if code := w.wait(t, 15*time.Second); code != 0 {
					t.Fatalf("exit status %d after SIGTERM; log:\n%s", code, tail(w.stderr.String(), logTail))
				}
			}
			produce(0, 1000, "first")
			runOnce()
			produce(0, 1000, "again")
			produce(1000, 1200, "new")
			runOnce()
			passed := againCount(t, cl)
			t.Logf("%v records rebuilt, %d copies passed", rebuilt, passed)
			switch {
			case header != "" && (rebuilt != 1000 || passed != 0):
				t.Errorf("%v records rebuilt and %d copies passed, want 1000 and 0", rebuilt, passed)
			case header == "" && (rebuilt != 0 || passed != 1000):
				t.Errorf("without the header: %v records rebuilt and %d copies passed, want 0 and 1000 (the limit)", rebuilt, passed)
			}
		})
	}
}

// againCount returns how many output records carry the value "again".
func againCount(t *testing.T, cl testbroker.Broker) int {
	t.Helper()
	got, err := cl.ReadAll(context.Background(), "out")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, msgs := range got {
		for _, m := range msgs {
			if string(m.Value) == "again" {
				n++
			}
		}
	}
	return n
}
