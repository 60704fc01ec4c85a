// Package scrapetest holds what the tests of several packages need to read a scrape: the sum of
// the samples a test looks for.
package scrapetest

import "github.com/prometheus/common/model"

// Sum returns the sum of the samples of v named name whose labels include every given label,
// value pair (a missing sample counts 0). It is safe for concurrent use.
func Sum(v model.Vector, name string, labelValues ...string) float64 {
	var sum float64
next:
	for _, x := range v {
		if string(x.Metric[model.MetricNameLabel]) != name {
			continue
		}
		for i := 0; i+1 < len(labelValues); i += 2 {
			if string(x.Metric[model.LabelName(labelValues[i])]) != labelValues[i+1] {
				continue next
			}
		}
		sum += float64(x.Value)
	}
	return sum
}
