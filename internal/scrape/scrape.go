// Package scrape reads a worker's /metrics: every sample with its labels (Samples), the sums and
// maxima of a few counters (Totals). The demo, the loadtest and the tests that run the binary use
// it. It imports nothing of kdedup.
package scrape

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Samples fetches the worker's /metrics at url and returns every sample in it, with its
// labels (a histogram as its name_bucket, name_sum and name_count samples). It returns an error
// if the request fails, the status is not 200 or the body is not in a Prometheus exposition
// format.
func Samples(url string) (model.Vector, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	dec := &expfmt.SampleDecoder{
		Dec:  expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header)),
		Opts: &expfmt.DecodeOptions{Timestamp: model.Now()},
	}
	var all model.Vector
	for {
		var samples model.Vector
		err := dec.Decode(&samples)
		if errors.Is(err, io.EOF) {
			return all, nil
		}
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", url, err)
		}
		all = append(all, samples...)
	}
}

// Totals fetches the worker's /metrics at url and returns, for each of the given sample
// names present (a counter or gauge, or a histogram's name_sum and name_count), "name" → the sum
// over its label sets and "name:max" → the largest value. It returns nil if the scrape or the
// parsing fails.
func Totals(url string, names ...string) map[string]float64 {
	samples, err := Samples(url)
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for _, s := range samples {
		n := string(s.Metric[model.MetricNameLabel])
		if !slices.Contains(names, n) {
			continue
		}
		v := float64(s.Value)
		out[n] += v
		if m, ok := out[n+":max"]; !ok || v > m {
			out[n+":max"] = v
		}
	}
	return out
}
