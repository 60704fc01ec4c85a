package main

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrapeMetrics fetches the worker's /metrics at url and returns, for each of the given sample
// names present (a counter or gauge, or a histogram's name_sum and name_count), "name" → the sum
// over its label sets and "name:max" → the largest value. It returns nil if the scrape or the
// parsing fails.
func scrapeMetrics(url string, names ...string) map[string]float64 {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	dec := &expfmt.SampleDecoder{
		Dec:  expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header)),
		Opts: &expfmt.DecodeOptions{Timestamp: model.Now()},
	}
	out := map[string]float64{}
	for {
		var samples model.Vector
		err := dec.Decode(&samples)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			return nil
		}
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
	}
}
