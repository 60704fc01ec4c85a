package window

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/tier"
)

// calibration is one case of TestEstimatedFPRCalibration: a filter of N=3 generations of 1s
// loaded at fill × Capacity new keys per interval.
type calibration struct {
	p        float64
	capacity uint64
	fill     float64
	probes   int // absent keys tested in all, spread over the measured instants
}

// calibrationSteps is how many instants per interval the calibration measures at: the current
// generation is 1/16, 2/16, ... 16/16 full.
const calibrationSteps = 16

// TestEstimatedFPRCalibration checks that Stats.EstimatedFPR is the rate a new key faces now, on
// the arrival pattern of a live worker: keys arrive at a constant rate, generations rotate every
// interval, and the current generation is partly full at any instant. After N intervals of
// warm-up it measures 10 intervals (2 for sampled filters), at 16 instants each, and compares
//
//   - "now": the false positives of absent keys tested at each instant with what the estimate
//     read at that instant predicts (the sum of estimate × keys tested);
//   - "loss": the share of the arriving new keys that were reported as seen, what a loadtest
//     measures as lost events, with the time average of the estimate;
//   - "exact" (sampled filters only, more than statsSampleGroups groups): the estimate from the
//     sampled load with the exact rate of the filter as it is, read from every group (at every
//     4th instant: reading them all is slow), in the time average and at every instant.
//
// A comparison whose expected count is at least 100 events must agree within 1.3x (3.3 standard
// deviations are ±33% at 100 events, ±11% at 1000); a smaller one must be consistent with a
// Poisson count (one-sided p-values above 1e-4). The probes are sized for what each level can
// show: at 1e-3 and full or overfull generations, 700 to 1250 expected events (a ±13% check);
// at 1e-3 half full (rate ~3e-6) and at 1e-6 full (~6e-7), 10M and 20M probes, about 30 and 13
// expected events, where the Poisson check catches an estimate off by about 2x (more probes
// only tighten a level whose formula the 1e-3 cases already validate). At a quarter of capacity
// the rates (1e-8 at 1e-3, 1e-14 at 1e-6) are far below what any number of probes can measure;
// there the sampled estimate is held against the exact rate.
func TestEstimatedFPRCalibration(t *testing.T) {
	tier.Statistical(t) // about 1e8 operations
	cases := []calibration{
		{1e-3, 20_000, 0.25, 1_000_000},
		{1e-3, 20_000, 0.5, 10_000_000},
		{1e-3, 20_000, 1, 2_000_000},
		{1e-3, 20_000, 1.5, 1_000_000},
		{1e-6, 20_000, 0.25, 1_000_000},
		{1e-6, 20_000, 0.5, 1_000_000},
		{1e-6, 20_000, 1, 20_000_000},
		{1e-6, 20_000, 1.5, 4_000_000},
		// More than statsSampleGroups groups: Stats samples them.
		{1e-3, 1_000_000, 0.25, 0},
		{1e-3, 1_000_000, 0.5, 0},
		{1e-3, 1_000_000, 1, 4_000_000},
		{1e-3, 1_000_000, 1.5, 1_000_000},
		{1e-6, 6_000_000, 0.25, 0},
		{1e-6, 1_500_000, 0.5, 0},
		{1e-6, 1_500_000, 1, 0},
		{1e-6, 1_500_000, 1.5, 4_000_000},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("p=%g/C=%d/fill=%g", c.p, c.capacity, c.fill), func(t *testing.T) {
			t.Parallel() // each case has its own filter and fixed seeds
			m := runCalibration(t, c)
			t.Logf("estimate (time average) %.3g; now: %d false positives of %d absent keys, estimate predicts %.1f; loss: %d of %d new keys (%.3g), estimate predicts %.1f; estimate/exact %.3f (worst instant %.2fx)",
				m.meanEst, m.fp, m.probed, m.fpWant, m.lost, m.arrivals, float64(m.lost)/float64(m.arrivals), m.lostWant, m.exactRatio, m.worst)
			agree(t, "now (absent keys)", float64(m.fp), m.fpWant)
			agree(t, "loss (arriving keys)", float64(m.lost), m.lostWant)
			if m.sampled {
				if r := m.exactRatio; r > 1.3 || r < 1/1.3 {
					t.Errorf("the sampled estimate is %.2fx the exact rate of the filter as it is", r)
				}
				if m.worst > 1.3 {
					t.Errorf("at one instant the sampled estimate and the exact rate were %.2fx apart", m.worst)
				}
			}
		})
	}
}

// calibrationResult is what runCalibration measured.
type calibrationResult struct {
	sampled          bool
	meanEst          float64 // time average over the measured instants
	exactRatio       float64 // estimate / exact rate, summed over the instants of the exact rate
	worst            float64 // the largest estimate/exact or exact/estimate of one instant
	probed, fp       int
	fpWant           float64 // Σ estimate × keys tested at that instant
	arrivals, lost   int
	lostWant         float64 // Σ mean estimate over a step × keys arriving in it
	instants         int
	sumEst           float64
	sumEstExact      float64 // of the estimate, at the instants of sumExact
	sumExact         float64
	probesPerInstant int
	keys, probeKeys  uint64 // the next arriving and absent key
}

// runCalibration runs one case (see TestEstimatedFPRCalibration).
func runCalibration(t *testing.T, c calibration) calibrationResult {
	const n = 3
	clock := newFakeClock()
	start := clock.Now()
	f := mustNew(t, Config{Generations: n, Interval: time.Second, Capacity: c.capacity, FalsePositiveRate: c.p,
		Seed: 11, Clock: clock.Now, SingleWriter: true})
	m := calibrationResult{sampled: f.groups > statsSampleGroups}
	measured := 10
	if m.sampled {
		measured = 2 // millions of keys per interval; and every group is read for the exact rate
	}
	m.probesPerInstant = c.probes / (measured * calibrationSteps)
	perStep := int(c.fill * float64(c.capacity) / calibrationSteps)
	var after float64
	for iv := range n + measured {
		for s := range calibrationSteps {
			step := start.Add(time.Duration(iv)*time.Second + time.Duration(s)*time.Second/calibrationSteps)
			clock.Set(step)
			f.AdvanceTo(step) // rotates at the first step of an interval
			// Stats only in the measured intervals. Nothing changes the filter between one step's
			// after and the next step's before but a rotation, at the first step of an interval.
			before := after
			if s == 0 && iv >= n {
				before = f.Stats().EstimatedFPR
			}
			lost := 0
			for range perStep {
				if f.TestAndAdd(key(1, m.keys)) {
					lost++
				}
				m.keys++
			}
			if iv < n {
				continue
			}
			clock.Set(step.Add(time.Second/calibrationSteps - time.Nanosecond))
			after = f.Stats().EstimatedFPR
			m.arrivals += perStep
			m.lost += lost
			m.lostWant += (before + after) / 2 * float64(perStep) // the rate the keys faced as they arrived
			m.measure(f, after)
		}
	}
	m.meanEst = m.sumEst / float64(m.instants)
	if m.sampled {
		m.exactRatio = m.sumEstExact / m.sumExact
	}
	return m
}

// measure records one instant: the estimate, the exact rate (sampled filters) and the probes.
func (m *calibrationResult) measure(f *Filter, est float64) {
	m.instants++
	m.sumEst += est
	if m.sampled && m.instants%4 == 1 {
		exact := exactFPR(f)
		m.sumExact += exact
		m.sumEstExact += est
		r := est / exact
		m.worst = max(m.worst, r, 1/r)
	}
	for range m.probesPerInstant {
		if f.Test(key(2, m.probeKeys)) {
			m.fp++
		}
		m.probeKeys++
	}
	m.probed += m.probesPerInstant
	m.fpWant += est * float64(m.probesPerInstant)
}

// exactFPR is the rate a new key faces now, from every group of every live generation.
func exactFPR(f *Filter) float64 {
	miss := 1.0
	for _, slot := range f.view.Load().active {
		miss *= 1 - f.generationStats(slot, 1).EstimatedFPR
	}
	return 1 - miss
}

// agree checks a count of events against the count the estimate predicts: within 1.3x when the
// prediction is at least 100, else consistent with a Poisson count of that mean.
func agree(t *testing.T, what string, got, want float64) {
	t.Helper()
	if want >= 100 {
		if r := got / want; r > 1.3 || r < 1/1.3 {
			t.Errorf("%s: measured %.0f, the estimate predicts %.1f: %.2fx", what, got, want, r)
		}
		return
	}
	if pHigh := poissonTail(want, int(got)); pHigh < 1e-4 {
		t.Errorf("%s: measured %.0f, the estimate predicts %.3g: P(X >= %.0f) = %.2g", what, got, want, got, pHigh)
	}
	if pLow := 1 - poissonTail(want, int(got)+1); pLow < 1e-4 {
		t.Errorf("%s: measured %.0f, the estimate predicts %.3g: P(X <= %.0f) = %.2g", what, got, want, got, pLow)
	}
}

// poissonTail returns P(X >= k) for X ~ Poisson(mean).
func poissonTail(mean float64, k int) float64 {
	if k <= 0 {
		return 1
	}
	if mean == 0 {
		return 0
	}
	cdf, term := 0.0, math.Exp(-mean)
	for i := range k {
		if i > 0 {
			term *= mean / float64(i)
		}
		cdf += term
	}
	return max(0, 1-cdf)
}

// TestMatchGivenKeys checks the exact tables against the two cases with a closed form and
// against a simulation of sectors and words, and firstMatch (the word of sector 0 a key picks
// among eight) against a simulation of groups.
func TestMatchGivenKeys(t *testing.T) {
	t.Parallel() // the tables are computed once, with a compare-and-swap
	for _, b := range []int{UsableSectorBits, wordBits} {
		for _, k := range []int{1, 4, 7, 11} {
			if got := matchGivenKeys(k, 0, b); got != 0 {
				t.Errorf("b=%d k=%d, no keys: %g, want 0", b, k, got)
			}
		}
		// One key of one bit: c = 1, so a further bit matches with probability 1/b.
		if got := matchGivenKeys(1, 1, b); math.Abs(got-1.0/float64(b)) > 1e-15 {
			t.Errorf("b=%d k=1, one key: %g, want %g", b, got, 1.0/float64(b))
		}
	}
	if raceEnabled || !tier.Enabled("statistical") {
		return // the simulation (10^8 steps) is of the statistical tier, and checks arithmetic, not concurrency
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ k, j, b int }{{7, 20, UsableSectorBits}, {7, 70, UsableSectorBits},
		{11, 30, UsableSectorBits}, {4, 200, UsableSectorBits}, {4, 5, wordBits}, {5, 12, wordBits}} {
		want := simulateMatch(rng, tc.k, tc.b, 200_000, func() int { return tc.j })
		got := matchGivenKeys(tc.k, tc.j, tc.b)
		jensen := math.Pow(-math.Expm1(float64(tc.j*tc.k)*math.Log1p(-1.0/float64(tc.b))), float64(tc.k))
		if math.Abs(got-want)/want > 0.01 {
			t.Errorf("k=%d j=%d b=%d: table %.5g, simulation %.5g", tc.k, tc.j, tc.b, got, want)
		}
		t.Logf("k=%d j=%d b=%d: table %.5g, simulation %.5g, (expected fill)^k %.5g", tc.k, tc.j, tc.b, got, want, jensen)
	}
	for _, tc := range []struct{ k, j int }{{4, 40}, {5, 75}} {
		want := simulateMatch(rng, tc.k, wordBits, 100_000, func() int { // keys of j in one word of eight
			n := 0
			for range tc.j {
				if rng.IntN(sectorWords) == 0 {
					n++
				}
			}
			return n
		})
		if got := firstMatch(tc.k, tc.j); math.Abs(got-want)/want > 0.02 {
			t.Errorf("firstMatch(%d, %d) = %.5g, simulation %.5g", tc.k, tc.j, got, want)
		}
	}
}

// simulateMatch returns the mean over trials of (c/b)^k, c being the bits set in a unit of b bits
// by keys() keys of k random bits each.
func simulateMatch(rng *rand.Rand, k, b, trials int, keys func() int) float64 {
	var sum float64
	unit := make([]bool, b)
	for range trials {
		clear(unit)
		c := 0
		for range keys() * k {
			if i := rng.IntN(b); !unit[i] {
				unit[i] = true
				c++
			}
		}
		sum += math.Pow(float64(c)/float64(b), float64(k))
	}
	return sum / float64(trials)
}

// TestKeysPerGroup checks that keysPerGroup inverts expectedSetBits, and that the estimated keys
// of a filter loaded with a known number of keys match it, sampled or not.
func TestKeysPerGroup(t *testing.T) {
	t.Parallel() // its own filters
	for _, ks := range [][]int{{11}, {4, 8}, {4, 4, 4}, {5, 5, 5, 5}} {
		for _, lambda := range []float64{0.5, 10, 40, 120} {
			if got := keysPerGroup(expectedSetBits(lambda, ks), ks); math.Abs(got-lambda)/lambda > 1e-9 {
				t.Errorf("ks=%v: keysPerGroup(expectedSetBits(%g)) = %g", ks, lambda, got)
			}
		}
	}
	if got := keysPerGroup(0, []int{5}); got != 0 {
		t.Errorf("empty: %g keys per group, want 0", got)
	}
	if got := keysPerGroup(sectorWords*wordBits, []int{5}); !math.IsInf(got, 1) {
		t.Errorf("full: %g keys per group, want +Inf", got)
	}
	capacities := []uint64{20_000, 1_000_000} // the second is sampled
	if raceEnabled {
		capacities = capacities[:1]
	}
	for _, capacity := range capacities {
		f := mustNew(t, Config{Generations: 2, Interval: time.Minute, Capacity: capacity, FalsePositiveRate: 1e-3})
		for i := range capacity {
			f.TestAndAdd(key(4, i))
		}
		got := f.Stats().Generations[0].EstimatedKeys
		if math.Abs(got-float64(capacity))/float64(capacity) > 0.01 {
			t.Errorf("capacity %d (%d groups): estimated %.0f keys", capacity, f.groups, got)
		}
	}
}

// TestPoissonLoadFPR checks the rate of a Poisson-loaded generation against the exact rate of
// a filter loaded with that many keys (every group read), and against the sizing's (read from
// its table, so within 1e-4).
func TestPoissonLoadFPR(t *testing.T) {
	for _, p := range []float64{1e-3, 1e-6} {
		f := mustNew(t, Config{Generations: 1, Interval: time.Minute, Capacity: 200_000, FalsePositiveRate: p, Seed: 3})
		f.limit0 = math.MaxUint64 // stage 0 alone, loaded to Capacity
		for i := range uint64(200_000) {
			f.TestAndAdd(key(5, i))
		}
		lambda := 200_000 / float64(f.groups)
		model := poissonLoadFPR(lambda, f.ks[:f.sectors])
		exact := f.generationStats(f.view.Load().cur, 1).EstimatedFPR
		sizing := f.Sizing().GenerationFPR
		t.Logf("p=%g: Poisson model %.4g, exact over %d groups %.4g, sizing %.4g", p, model, f.groups, exact, sizing)
		if r := model / exact; r > 1.1 || r < 1/1.1 {
			t.Errorf("p=%g: Poisson model %.4g is %.3fx the exact rate %.4g", p, model, r, exact)
		}
		if math.Abs(sizing/model-1) > 1e-4 { // the sizing reads it from its table (layoutRate)
			t.Errorf("p=%g: Poisson model %.6g, sizing %.6g: want the same within 1e-4", p, model, sizing)
		}
	}
	if got := poissonLoadFPR(0, []int{5}); got != 0 {
		t.Errorf("no keys: %g", got)
	}
	if got := poissonLoadFPR(math.Inf(1), []int{5}); got != 1 {
		t.Errorf("full: %g", got)
	}
}

// TestStatsSampled checks the sampled path of Stats (filters of more than statsSampleGroups
// groups) on filters small enough to read whole: the same filter's Stats reading every 8th group
// against Stats reading all of them, per generation, for stage 0 and grown stages (1.5× the
// capacity grows one). The keys a sampled fill implies must be within 5% of the keys added, and
// the rate computed from the sampled load within 1.3× of the exact rate of the filter as it is
// (TestEstimatedFPRCalibration holds the exact rate against measured false positives).
func TestStatsSampled(t *testing.T) {
	const capacity = 200_000
	for _, p := range []float64{1e-3, 1e-6} {
		for _, fill := range []float64{0.5, 1, 1.5} {
			t.Run(fmt.Sprintf("p=%g/fill=%g", p, fill), func(t *testing.T) {
				t.Parallel()
				f := mustNew(t, Config{Generations: 2, Interval: time.Hour, Capacity: capacity, FalsePositiveRate: p, Seed: 3, SingleWriter: true})
				keys := uint64(fill * capacity)
				for i := range keys {
					f.TestAndAdd(key(7, i))
				}
				f.statsSample = f.groups // every group: exact
				exact := f.Stats().Generations[0]
				f.statsSample = f.groups / 8
				sampled := f.Stats().Generations[0]
				if fill > 1 && sampled.Stages == 0 {
					t.Fatalf("no stage grew at %g× the capacity", fill)
				}
				if r := sampled.EstimatedKeys / float64(keys); math.Abs(r-1) > 0.05 {
					t.Errorf("sampled fill implies %.0f keys, %d were added (%.3fx)", sampled.EstimatedKeys, keys, r)
				}
				if r := sampled.EstimatedFPR / exact.EstimatedFPR; r > 1.3 || r < 1/1.3 {
					t.Errorf("sampled rate %.3g, exact %.3g (%.2fx)", sampled.EstimatedFPR, exact.EstimatedFPR, r)
				}
				t.Logf("%d keys, %d stages: sampled %.0f keys, rate %.3g; exact %.0f keys, rate %.3g",
					keys, sampled.Stages, sampled.EstimatedKeys, sampled.EstimatedFPR, exact.EstimatedKeys, exact.EstimatedFPR)
			})
		}
	}
}
