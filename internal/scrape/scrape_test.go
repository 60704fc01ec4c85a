package scrape

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/kdedup/kdedup/internal/scrape/scrapetest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestScrapeMetrics serves a registry like the worker's and checks what Totals makes of
// it (sums and maxima over label sets, histogram sums and counts, exact names only, nil on
// failure) and that Samples keeps the labels.
func TestScrapeMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	dups := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kdedup_duplicates_total"}, []string{"partition"})
	dups.WithLabelValues("0").Add(3)
	dups.WithLabelValues("1").Add(5)
	fpr := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kdedup_fpr"}, []string{"filter"})
	fpr.WithLabelValues("0").Set(1e-9)
	fpr.WithLabelValues("1").Set(4e-9)
	restore := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kdedup_restore_seconds"})
	restore.Observe(0.25)
	restore.Observe(0.5)
	prefix := prometheus.NewCounter(prometheus.CounterOpts{Name: "kdedup_duplicates_total_other"})
	prefix.Add(100)
	reg.MustRegister(dups, fpr, restore, prefix)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("kdedup_duplicates_total{partition=\"0\" 3\n"))
	}))
	defer garbage.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte("kdedup_duplicates_total{partition=\"0\"} 3\n"))
	}))
	defer failing.Close()

	tests := []struct {
		name  string
		url   string
		names []string
		want  map[string]float64
	}{
		{"counter and gauge", srv.URL, []string{"kdedup_duplicates_total", "kdedup_fpr", "kdedup_absent"}, map[string]float64{
			"kdedup_duplicates_total": 8, "kdedup_duplicates_total:max": 5, "kdedup_fpr": 5e-9, "kdedup_fpr:max": 4e-9,
		}},
		{"histogram sum and count", srv.URL, []string{"kdedup_restore_seconds_sum", "kdedup_restore_seconds_count"}, map[string]float64{
			"kdedup_restore_seconds_sum": 0.75, "kdedup_restore_seconds_sum:max": 0.75,
			"kdedup_restore_seconds_count": 2, "kdedup_restore_seconds_count:max": 2,
		}},
		{"nothing asked", srv.URL, nil, map[string]float64{}},
		{"not the exposition format", garbage.URL, []string{"kdedup_duplicates_total"}, nil},
		{"nobody listening", "http://127.0.0.1:1/metrics", []string{"kdedup_duplicates_total"}, nil},
		{"an error status", failing.URL, []string{"kdedup_duplicates_total"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Totals(tt.url, tt.names...)
			if (got == nil) != (tt.want == nil) || !maps.Equal(got, tt.want) {
				t.Errorf("Totals = %v, want %v", got, tt.want)
			}
		})
	}
	// The samples keep their labels.
	v, err := Samples(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"kdedup_duplicates_total", nil, 8},
		{"kdedup_duplicates_total", []string{"partition", "1"}, 5},
		{"kdedup_duplicates_total", []string{"partition", "2"}, 0},
		{"kdedup_restore_seconds_count", nil, 2},
	} {
		if got := scrapetest.Sum(v, c.name, c.labels...); got != c.want {
			t.Errorf("Samples: %s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}
