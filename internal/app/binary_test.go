package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// TestBinaryConfigError proves that the binary reports every configuration problem, naming each
// variable, and exits with status 2 at once.
func TestBinaryConfigError(t *testing.T) {
	t.Parallel()
	w := startWorker(t, map[string]string{"KAFKA_BATCH_TIMEOUT": "fast", "DEDUP_MODE": "shred"})
	if code := w.wait(t, 5*time.Second); code != 2 {
		t.Errorf("exit status %d, want 2", code)
	}
	for _, v := range []string{"KAFKA_BROKERS", "KAFKA_INPUT_TOPIC", "KAFKA_OUTPUT_TOPIC", "KAFKA_BATCH_TIMEOUT", "DEDUP_MODE"} {
		if !strings.Contains(w.stderr.String(), v+":") {
			t.Errorf("stderr does not name %s:\n%s", v, w.stderr)
		}
	}
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestBinarySIGTERM runs the real binary (real dedup.Set, key extraction and metrics) against an
// embedded broker: it becomes ready, deduplicates, serves /metrics, and on SIGTERM drains,
// commits everything, leaves the group and exits 0 well within SHUTDOWN_TIMEOUT.
func TestBinarySIGTERM(t *testing.T) {
	t.Parallel()
	cl := testbroker.Start(t, testbroker.Fake, testbroker.Options{Topics: map[string]int32{"in": 2, "out": 2}})
	ctx := context.Background()
	for p := range 2 {
		var msgs []kafkaio.Record
		for i := range 200 {
			msgs = append(msgs, kafkaio.Record{Key: []byte(fmt.Sprintf("id-%d-%d", p, i%150)), Value: []byte(fmt.Sprint(i))})
		}
		if err := cl.Produce(ctx, "in", p, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	w := startWorker(t, map[string]string{
		"KAFKA_BROKERS": strings.Join(cl.Addrs(), ","), "KAFKA_INPUT_TOPIC": "in", "KAFKA_OUTPUT_TOPIC": "out",
		"KAFKA_SESSION_TIMEOUT": "2s", "KAFKA_HEARTBEAT_INTERVAL": "200ms", "KAFKA_COMMIT_INTERVAL": "1h",
		"HTTP_ADDR": "127.0.0.1:0", "SHUTDOWN_TIMEOUT": "10s", "DEDUP_WINDOW_CAPACITY": "10000",
	})
	waitFor(t, w, 30*time.Second, "/readyz to answer 200", func() bool {
		code, _ := httpGet(w.url("/readyz"))
		return code == 200
	})
	if code, _ := httpGet(w.url("/healthz")); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	// Wait for the output (commits only happen at shutdown with a 1h interval).
	waitFor(t, w, 30*time.Second, "300 output records", func() bool { return outputTotal(cl) == 300 })
	// The metrics count a batch after its output is acknowledged, and a last batch of only
	// duplicates produces nothing: wait until they have counted every input record.
	waitFor(t, w, 30*time.Second, "the metrics to count 400 records", func() bool {
		m := w.metrics(t)
		return m.value("kdedup_records_consumed_total") == 400 && m.value("kdedup_duplicates_total", "mode", "drop") == 100
	})
	m := w.metrics(t)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"kdedup_records_consumed_total", []string{"partition", "0"}, 200},
		{"kdedup_duplicates_total", []string{"mode", "drop", "partition", "1"}, 50},
		{"kdedup_ready", nil, 1},
	} {
		if got := m.value(c.name, c.labels...); got != c.want {
			t.Errorf("/metrics: %s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	began := time.Now()
	w.signal(t, syscall.SIGTERM)
	if code := w.wait(t, 12*time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0; log:\n%s", code, tail(w.stderr.String(), logTail))
	}
	t.Logf("stopped %v after SIGTERM", time.Since(began).Round(time.Millisecond))
	com, err := cl.Committed(ctx, "kdedup", "in")
	if err != nil {
		t.Fatal(err)
	}
	if com[0] != 200 || com[1] != 200 {
		t.Errorf("committed %v after SIGTERM, want 200 on both partitions", com)
	}
	for _, msg := range []string{eventDraining, eventLeft, eventStopped} {
		if _, ok := w.event(msg); !ok {
			t.Errorf("the log has no %q event", msg)
		}
	}
}
