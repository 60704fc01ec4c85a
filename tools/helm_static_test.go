package tools

import "testing"

// TestChartStaticMembership proves that kafka.staticMembership sets KAFKA_GROUP_INSTANCE_ID to
// the pod's name (stable in a StatefulSet), the chart's default, and that false leaves it unset
// (dynamic membership).
func TestChartStaticMembership(t *testing.T) {
	for _, tt := range []struct {
		values string
		want   bool
	}{{"", true}, {"kafka: {staticMembership: false}", false}} {
		r, err := renderChart(tt.values)
		if err != nil {
			t.Fatal(err)
		}
		got := false
		for _, e := range r.container(t).Env {
			if e.Name == "KAFKA_GROUP_INSTANCE_ID" {
				got = e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
				if !got {
					t.Errorf("values %q: KAFKA_GROUP_INSTANCE_ID is not the pod name: %+v", tt.values, e)
				}
			}
		}
		if got != tt.want {
			t.Errorf("values %q: KAFKA_GROUP_INSTANCE_ID set %v, want %v", tt.values, got, tt.want)
		}
	}
}
