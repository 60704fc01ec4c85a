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
	r := NewRoute(reg, []string{"message_too_large"})
	r.Routed("eu", 3)
	r.Latency(4*time.Millisecond, 1)
	r.Lag("eu", 1, 12)
	r.FetchError("eu", 1)
	r.PartitionBlocked("eu", 2, "message_too_large", true)
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

// TestRouteRefusals checks that a router's failed fetches and blocked partitions are reported by
// input topic and partition, that an unknown reason is bounded to "other", and that a block that
// lifts removes its series.
func TestRouteRefusals(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := populateRoute(reg)
	r.FetchError("eu", 1)
	r.PartitionBlocked("us", 0, "no such reason", true)
	if got := testutil.ToFloat64(r.fetchErrors.WithLabelValues("eu", "1")); got != 2 {
		t.Errorf("fetch errors %v, want 2", got)
	}
	const header = "# HELP kdedup_route_partition_blocked 1 for a router's input partition (DEDUP_SCOPE=routed) that stopped at a record the route topic refuses for good, or at input the router refused to decode (reason as in kdedup_dead_letters_total), that no dead-letter topic took: nothing after it is routed. Absent while no router partition is blocked. The second stage's are kdedup_partition_blocked.\n# TYPE kdedup_route_partition_blocked gauge\n"
	want := header + "kdedup_route_partition_blocked{partition=\"2\",reason=\"message_too_large\",topic=\"eu\"} 1\n" +
		"kdedup_route_partition_blocked{partition=\"0\",reason=\"other\",topic=\"us\"} 1\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kdedup_route_partition_blocked"); err != nil {
		t.Error(err)
	}
	r.PartitionBlocked("eu", 2, "message_too_large", false)
	want = header + "kdedup_route_partition_blocked{partition=\"0\",reason=\"other\",topic=\"us\"} 1\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kdedup_route_partition_blocked"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
