package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// populateRoute registers the router metrics on reg with a value in each.
func populateRoute(reg *prometheus.Registry) *Route {
	r := NewRoute(reg)
	r.Routed("eu", 3)
	r.Latency(4 * time.Millisecond)
	r.Lag("eu", 1, 12)
	return r
}

// TestRouteLag checks that a router's lag is reported per input topic and partition, and that
// Unassigned forgets one topic's partitions (moved to another replica) and no other's.
func TestRouteLag(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := populateRoute(reg)
	r.Lag("us", 0, 5)
	const header = "# HELP kdedup_route_lag_records Records between a router's position and the end of an assigned input partition (DEDUP_SCOPE=routed): the first stage's consumer lag. The second stage's is kdedup_consumer_lag_records, its input being the route topic.\n# TYPE kdedup_route_lag_records gauge\n"
	want := header + "kdedup_route_lag_records{partition=\"1\",topic=\"eu\"} 12\nkdedup_route_lag_records{partition=\"0\",topic=\"us\"} 5\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kdedup_route_lag_records"); err != nil {
		t.Error(err)
	}
	r.Unassigned("eu")
	want = header + "kdedup_route_lag_records{partition=\"0\",topic=\"us\"} 5\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kdedup_route_lag_records"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(r.routed.WithLabelValues("eu")); got != 3 {
		t.Errorf("routed %v, want 3", got)
	}
}
