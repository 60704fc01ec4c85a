package app

import (
	"context"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// refreshIDs is how many identities of each kind the refresh tests send.
const refreshIDs = 200

// refreshSend is one record of the refresh scenario: identity id sent at offset at from the start.
type refreshSend struct {
	id string
	at time.Duration
}

// refreshScenario is the case: on a 3 × 1s window, identities re-sent every 1.5s for
// 7.5s (r-*: six sightings) and identities left alone after their first sighting until 4.5s
// later, past the window (a-*: two sightings).
func refreshScenario() []refreshSend {
	var s []refreshSend
	for k := range 6 {
		at := time.Duration(k) * 1500 * time.Millisecond
		for i := range refreshIDs {
			s = append(s, refreshSend{fmt.Sprintf("r-%03d", i), at})
			if k == 0 || k == 3 {
				s = append(s, refreshSend{fmt.Sprintf("a-%03d", i), at})
			}
		}
	}
	return s
}

// refreshPartition is the input partition of id.
func refreshPartition(id string) int { return int(crc32.ChecksumIEEE([]byte(id)) % restartPartitions) }

// countRefreshOutput returns how many times each identity reached the output topic.
func countRefreshOutput(t *testing.T, cl testbroker.Broker) map[string]int {
	t.Helper()
	got, err := cl.ReadAll(context.Background(), "out")
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, msgs := range got {
		for _, m := range msgs {
			n[string(m.Key)]++
		}
	}
	return n
}

// checkRefreshPasses checks the passes of the scenario's identities: re-sent ones pass once
// with refresh and three times without (every window, as the issue found), left-alone ones twice.
func checkRefreshPasses(t *testing.T, n map[string]int, refresh bool) {
	t.Helper()
	want := map[bool]int{true: 1, false: 3}[refresh]
	bad := 0
	for i := range refreshIDs {
		r, a := fmt.Sprintf("r-%03d", i), fmt.Sprintf("a-%03d", i)
		if n[r] != want || n[a] != 2 {
			if bad++; bad <= 5 {
				t.Errorf("refresh=%v: %s passed %d times (want %d), %s %d times (want 2)", refresh, r, n[r], want, a, n[a])
			}
		}
	}
	if bad > 5 {
		t.Errorf("... %d identities in all", bad)
	}
}

// TestRefreshEventTime runs the scenario through the real worker under DEDUP_WINDOW_CLOCK=event:
// the records carry their sending times as timestamps and are produced at once, so the window
// follows them exactly, whatever the machine's load. With DEDUP_WINDOW_REFRESH=true re-sent
// identities pass once and left-alone ones again after the window; without it re-sent ones pass
// every window.
func TestRefreshEventTime(t *testing.T) {
	t.Parallel()
	for _, refresh := range []bool{true, false} {
		t.Run(fmt.Sprintf("refresh=%v", refresh), func(t *testing.T) {
			t.Parallel()
			cl := restartCluster(t)
			base := time.Now().Add(-time.Minute).Truncate(time.Second)
			byPart := make([][]kafkaio.Record, restartPartitions)
			for _, s := range refreshScenario() {
				p := refreshPartition(s.id)
				byPart[p] = append(byPart[p], kafkaio.Record{Key: []byte(s.id), Value: []byte("v"), Time: base.Add(s.at)})
			}
			for p, msgs := range byPart {
				if err := cl.Produce(context.Background(), "in", p, msgs...); err != nil {
					t.Fatal(err)
				}
			}
			environ := restartEnviron(cl, "", "partition")
			environ["DEDUP_WINDOW_COUNT"], environ["DEDUP_WINDOW_INTERVAL"] = "3", "1s"
			environ["DEDUP_WINDOW_CLOCK"] = "event"
			environ["DEDUP_WINDOW_REFRESH"] = fmt.Sprint(refresh)
			w := startWorker(t, environ)
			waitFor(t, w, 30*time.Second, "catch-up", func() bool { return caughtUp(cl) })
			checkRefreshPasses(t, countRefreshOutput(t, cl), refresh)
			// base is a whole second: every re-sending falls in a generation of its own, after
			// the one of the sighting before, so each re-sent identity re-arms 5 times.
			want := map[bool]float64{true: 5 * refreshIDs, false: 0}[refresh]
			if got := w.metrics(t).value("kdedup_filter_refreshes_total"); got != want {
				t.Errorf("kdedup_filter_refreshes_total = %v, want %v", got, want)
			}
		})
	}
}

// TestRefreshProcessingTime runs the scenario under the wall clock, as sent: a batch every 1.5s
// for 7.5s. An identity is remembered at least 2s after its last sighting here, and each batch
// must be processed within 0.5s of its sending for the re-sent identities to stay remembered:
// ample for a worker that is caught up, on any machine this suite runs on.
func TestRefreshProcessingTime(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("real time: 8s")
	}
	cl := restartCluster(t)
	environ := restartEnviron(cl, "", "partition")
	environ["DEDUP_WINDOW_COUNT"], environ["DEDUP_WINDOW_INTERVAL"] = "3", "1s"
	environ["DEDUP_WINDOW_REFRESH"] = "true"
	environ["KAFKA_FETCH_MAX_WAIT"] = "50ms"
	w := startWorker(t, environ)
	waitFor(t, w, 30*time.Second, "ready", func() bool {
		code, _ := httpGet(w.url("/readyz"))
		return code == 200
	})
	sends := refreshScenario()
	start := time.Now()
	for k := 0; len(sends) > 0; k++ {
		at := time.Duration(k) * 1500 * time.Millisecond
		time.Sleep(time.Until(start.Add(at)))
		byPart := make([][]kafkaio.Record, restartPartitions)
		for len(sends) > 0 && sends[0].at == at {
			p := refreshPartition(sends[0].id)
			byPart[p] = append(byPart[p], kafkaio.Record{Key: []byte(sends[0].id), Value: []byte("v")})
			sends = sends[1:]
		}
		for p, msgs := range byPart {
			if err := cl.Produce(context.Background(), "in", p, msgs...); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, w, 30*time.Second, "catch-up", func() bool { return caughtUp(cl) })
	checkRefreshPasses(t, countRefreshOutput(t, cl), true)
}
