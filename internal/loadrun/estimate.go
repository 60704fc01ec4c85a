package loadrun

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/kdedup/kdedup/internal/scrape"
	"github.com/kdedup/kdedup/loadtest"
	"github.com/prometheus/common/model"
)

// estimateSampler reads the worker's kdedup_filter_false_positive_rate_estimated, per filter, from
// its /metrics at random instants (every 50 to 150ms, times samplerSpread) while an embedded
// loadtest runs. One reading
// is the rate a new key faces at that instant, which rises as the current generation fills; the
// time average of many readings is what a loss rate over the same time measures
// (loadtest.FilterInfo.EstimateAverage). Random instants keep the readings from locking onto the
// phase of the rotation. Safe for concurrent use.
type estimateSampler struct {
	url  func() string // the worker's current base URL; "" while it has none
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex
	samples []estimateSample
}

// estimateSample is one filter's estimate at one instant.
type estimateSample struct {
	at     time.Time
	filter string
	v      float64
}

// samplerSpread returns how many times the base interval the sampler of a worker with partitions
// input partitions waits between scrapes: 1 up to 31 partitions, then in proportion, so that the
// scrapes cost about what they cost a worker of 16 partitions. A scrape's cost grows with the
// worker's series (a filter and its partition's metrics each), and at 10 scrapes a second of 1,000
// partitions the scrapes and the filter statistics they compute took over a third of the embedded
// loadtest's CPU, starving the pipeline it measures. Each scrape reads every filter, so the
// readings of all filters together per second stay about the same.
func samplerSpread(partitions int) time.Duration {
	return time.Duration(max(1, partitions/16))
}

// startEstimateSampler starts reading the estimates of the worker at url() until halt, spaced for
// a worker of partitions input partitions (samplerSpread); seed fixes the random instants.
func startEstimateSampler(ctx context.Context, url func() string, partitions int, seed uint64) *estimateSampler {
	ctx, stop := context.WithCancel(ctx)
	s := &estimateSampler{url: url, stop: stop, done: make(chan struct{})}
	rng := rand.New(rand.NewPCG(seed, 0x5a4d91e))
	spread := samplerSpread(partitions)
	go func() {
		defer close(s.done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(spread * (50*time.Millisecond + time.Duration(rng.Int64N(int64(100*time.Millisecond))))):
			}
			s.read()
		}
	}()
	return s
}

// read scrapes the worker once; a failed scrape (the worker restarting) is skipped.
func (s *estimateSampler) read() {
	base := s.url()
	if base == "" {
		return
	}
	samples, err := scrape.Samples(base + "/metrics")
	if err != nil {
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range samples {
		if m.Metric[model.MetricNameLabel] == "kdedup_filter_false_positive_rate_estimated" {
			s.samples = append(s.samples, estimateSample{at: now, filter: string(m.Metric["filter"]), v: float64(m.Value)})
		}
	}
}

// halt stops reading and returns every reading.
func (s *estimateSampler) halt() []estimateSample {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// estimateAverage returns the time average of the readings taken in [from, to] of every filter
// with steady unique events (weights), the average of those weighted by the events, and the
// number of readings it averages; -1 when no such filter has a reading.
func estimateAverage(samples []estimateSample, from, to time.Time, weights map[string]loadtest.FilterLoss) (avg float64, n int, byFilter map[string]float64) {
	sums, counts := map[string]float64{}, map[string]int{}
	for _, s := range samples {
		if !s.at.Before(from) && !s.at.After(to) {
			sums[s.filter] += s.v
			counts[s.filter]++
		}
	}
	var sum, weight float64
	for name, w := range weights {
		if counts[name] == 0 || w.Uniques == 0 {
			continue
		}
		if byFilter == nil {
			byFilter = map[string]float64{}
		}
		byFilter[name] = sums[name] / float64(counts[name])
		sum += float64(w.Uniques) * byFilter[name]
		weight += float64(w.Uniques)
		n += counts[name]
	}
	if weight == 0 {
		return -1, 0, nil
	}
	return sum / weight, n, byFilter
}
