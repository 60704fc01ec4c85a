package app

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/prometheus/client_golang/prometheus"
)

// TestHTTPHandler proves /healthz is always OK, /readyz follows the readiness function, and
// /metrics serves the given registry and not the process-global default one.
func TestHTTPHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "kdedup_test_counter_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	global := prometheus.NewCounter(prometheus.CounterOpts{Name: "kdedup_test_global_total", Help: "test"})
	prometheus.MustRegister(global)
	defer prometheus.Unregister(global)

	var ready atomic.Bool
	var blocked atomic.Pointer[[]consumer.BlockedPartition]
	blocked.Store(&[]consumer.BlockedPartition{})
	srv := httptest.NewServer(newHTTPHandler(reg, ready.Load, func() []consumer.BlockedPartition { return *blocked.Load() }))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		ready      bool
		path       string
		wantStatus int
		wantBody   string
	}{
		{false, "/healthz", 200, "ok"},
		{false, "/readyz", 503, "not ready"},
		{true, "/readyz", 200, "ready"},
		{true, "/healthz", 200, "ok"},
		{true, "/metrics", 200, "kdedup_test_counter_total 3"},
		{true, "/nope", 404, ""},
	} {
		ready.Store(tc.ready)
		status, body := get(tc.path)
		if status != tc.wantStatus || !strings.Contains(body, tc.wantBody) {
			t.Errorf("GET %s (ready=%v) = %d %q, want %d containing %q", tc.path, tc.ready, status, body, tc.wantStatus, tc.wantBody)
		}
	}
	if _, body := get("/metrics"); strings.Contains(body, "kdedup_test_global_total") {
		t.Error("/metrics serves the global default registry")
	}

	// A blocked partition is listed, whatever the readiness.
	blocked.Store(&[]consumer.BlockedPartition{{Partition: 2, Offset: 3245, Topic: "out", Reason: "message_too_large",
		Error: "Message Size Too Large", Since: time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)}})
	want := "partition 2 blocked at offset 3245 since 2026-11-26T09:00:00Z: topic \"out\" refuses the record (message_too_large: Message Size Too Large)\n"
	for _, r := range []bool{true, false} {
		ready.Store(r)
		if _, body := get("/readyz"); !strings.HasSuffix(body, want) {
			t.Errorf("/readyz (ready=%v) = %q, want it to end with %q", r, body, want)
		}
	}
	blocked.Store(&[]consumer.BlockedPartition{{Partition: 0, Offset: 50, Topic: "in", Reason: "input_too_large",
		Error: "too large", Since: time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)}})
	want = "partition 0 blocked at offset 50 since 2026-11-26T09:00:00Z: the input cannot be decoded within the limits (input_too_large: too large)\n"
	if _, body := get("/readyz"); !strings.HasSuffix(body, want) {
		t.Errorf("/readyz = %q, want it to end with %q", body, want)
	}
}
