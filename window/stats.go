package window

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// statsSampleGroups is how many groups Stats reads per generation at most. A filter with more
// groups is sampled (every stride-th group), which keeps Stats cheap on multi-GiB filters.
const statsSampleGroups = 16384

// Stats describes the filter's state for metrics.
type Stats struct {
	// ConfiguredFPR is Config.FalsePositiveRate.
	ConfiguredFPR float64
	// EstimatedFPR is the false-positive rate a never-seen key faces now: the chance that a key
	// tested at this instant is reported as seen by one of the live generations, from their fill
	// (see Filter.Stats for how it is computed). The current generation fills during its
	// interval, so the rate rises from rotation to rotation: the loss over a period, such as the
	// share of unique events a run loses, is the time average of EstimatedFPR over that period,
	// not any one reading of it. Above ConfiguredFPR it means more distinct keys arrive per
	// interval than Capacity: real events are being dropped as duplicates more often than planned.
	EstimatedFPR float64
	// CapacityBits is the number of bits of the N generations a key is tested against, grown
	// stages included.
	CapacityBits uint64
	// TotalBytes is the memory the filter allocated, grown stages included.
	TotalBytes uint64
	// MaxBytes is the memory cap (Config.MaxBytes, or DefaultMaxBytes).
	MaxBytes uint64
	// Stages is the number of grown stages (beyond stage 0) of the live generations.
	Stages int
	// Growths counts the stages added since the filter was created (not carried by snapshots).
	Growths uint64
	// Refreshes counts the seen keys re-armed by the TestAndRefresh methods since the filter was
	// created or restored (see refresh.go).
	Refreshes uint64
	// AtCap is true when a live generation needed a further stage and the memory cap refused it:
	// from then on Config.Overload applies, and with OverloadDrop EstimatedFPR rises above the
	// target as keys arrive. It clears when that generation expires.
	AtCap bool
	// Rotations counts generation boundaries crossed since the filter was created (restored filters
	// continue the count of the snapshot).
	Rotations uint64
	// Window is how far back the live generations reach: from the oldest live generation's start
	// to now.
	Window time.Duration
	// Generations describes the live generations, newest first.
	Generations []GenerationStats
}

// GenerationStats describes one live generation.
type GenerationStats struct {
	// Epoch is the generation's number, counted from the filter's origin.
	Epoch uint64
	// Start is when the generation began.
	Start time.Time
	// Fill is the fraction of the generation's data bits that are set (tag bits and words left
	// from the slot's previous use do not count). A generation that reached Capacity keys is close
	// to half full.
	Fill float64
	// EstimatedKeys is the number of distinct keys the fill implies.
	EstimatedKeys float64
	// EstimatedFPR is the false-positive rate of this generation alone, its grown stages
	// included.
	EstimatedFPR float64
	// Stages is the number of grown stages of the generation (0 while it is within Capacity).
	Stages int
	// AtCap is true when the generation needed a further stage and the memory cap refused it.
	AtCap bool
}

// Stats returns the filter's state. It reads at most statsSampleGroups blocks per generation, so
// it is cheap enough to call every second, and it takes no lock: it never waits for a rotation
// or a snapshot, and writers continue meanwhile, so the numbers are a consistent-enough view for
// monitoring, not an exact count.
//
// A never-seen key hashes to a uniformly random group and sets K bits of it at uniformly random
// positions, K/S in each sector (with replacement), so a generation reports it as seen with
// probability ∏ (c_s/UsableSectorBits)^(k_s) when sector s of the key's group has c_s bits set.
// The generation's rate is the mean of that over its groups. When Stats reads every group (at
// most statsSampleGroups of them), that mean is exact for the filter as it is. A larger filter is
// sampled, and the mean over a sample of groups is a poor estimate: at a low fill nearly all the
// rate comes from the few groups that drew the most keys (at 1e-6 and a quarter of capacity the
// mean of 16384 sampled groups is off by ±35%, mostly low). A sampled generation's rate is
// therefore computed from its load: the mean number of keys per group λ that the sampled fill
// implies (to ±0.3%), and the exact rate of a generation whose groups hold Poisson(λ) keys, which
// is what uniformly hashed keys give. The real rate of the filter follows that within a few
// percent near and above capacity; far below capacity, where it is orders of magnitude under
// the target, it may stray further from it (by chance, a filter's few fullest groups hold more
// or fewer keys than Poisson(λ) predicts). The window's rate combines the generations as
// independent tests: 1 - ∏(1 - rate_g).
func (f *Filter) Stats() Stats {
	v := f.view.Load()
	now := f.cfg.Clock()
	st := Stats{
		ConfiguredFPR: f.cfg.FalsePositiveRate,
		CapacityBits:  uint64(f.cfg.Generations) * f.sizing.BitsPerGeneration,
		TotalBytes:    f.sizing.TotalBytes + uint64(max(f.stageBytes.Load(), 0)),
		MaxBytes:      f.maxBytes,
		Growths:       f.growths.Load(),
		Refreshes:     atomic.LoadUint64(&f.refreshes.n),
		Rotations:     f.rotations.Load(),
		Generations:   make([]GenerationStats, 0, len(v.active)),
	}
	st.Window = now.Sub(f.startOf(v.epochs[len(v.epochs)-1]))
	stride := max(f.groups/statsSampleGroups, 1)
	miss := 1.0
	for i, slot := range v.active {
		gs := f.generationStats(slot, stride)
		gs.Epoch = v.epochs[i]
		gs.Start = f.startOf(gs.Epoch)
		f.addStageStats(&st, &gs)
		miss *= 1 - gs.EstimatedFPR
		st.Generations = append(st.Generations, gs)
	}
	st.EstimatedFPR = 1 - miss
	return st
}

// addStageStats adds the grown stages of gs's generation to gs and st: their keys, bits, bytes
// and rates (a key is tested against every stage, so they combine as independent tests).
func (f *Filter) addStageStats(st *Stats, gs *GenerationStats) {
	gg := f.grownGenIfAny(gs.Epoch)
	if gg == nil {
		return
	}
	gs.AtCap = gg.capped.Load()
	st.AtCap = st.AtCap || gs.AtCap
	miss := 1 - gs.EstimatedFPR
	for _, sg := range *gg.stages.Load() {
		keys, fpr := sg.stats()
		gs.EstimatedKeys += keys
		miss *= 1 - fpr
		gs.Stages++
		st.Stages++
		st.CapacityBits += sg.groups * uint64(sg.sectors) * SectorBits
	}
	gs.EstimatedFPR = 1 - miss
}

// grownGenIfAny returns the growth record of generation epoch, or nil if it has not grown.
func (f *Filter) grownGenIfAny(epoch uint64) *grownGen {
	if gs := f.grown.Load(); gs != nil {
		for _, gg := range gs.gens {
			if gg.epoch == epoch {
				return gg
			}
		}
	}
	return nil
}

// stats returns the number of keys a grown stage's fill implies and its false-positive rate,
// computed as generationStats does (exactly when every group is read, else from the load).
func (sg *stage) stats() (keys, fpr float64) {
	stride := max(sg.groups/statsSampleGroups, 1)
	ks := sg.ks[:sg.sectors]
	var set, groups uint64
	var exact float64
	for g := uint64(0); g < sg.groups; g += stride {
		i := g * uint64(sg.sectors) * sectorWords
		match := 1.0
		for _, k := range ks {
			c := countValid((*[sectorWords]uint64)(sg.words[i:i+sectorWords]), 0)
			set += uint64(c)
			match *= math.Pow(float64(c)/UsableSectorBits, float64(k))
			i += sectorWords
		}
		exact += match
		groups++
	}
	lambda := keysPerGroup(float64(set)/float64(groups), ks)
	if stride > 1 {
		return lambda * float64(sg.groups), poissonLoadFPR(lambda, ks)
	}
	return lambda * float64(sg.groups), exact / float64(groups)
}

// generationStats reads every stride-th group of a slot's generation (see Stats).
func (f *Filter) generationStats(slot int, stride uint64) GenerationStats {
	tag := tagOf(f.uses[slot].Load())
	ks := f.ks[:f.sectors]
	var set, groups uint64
	var exact float64
	for g := uint64(0); g < f.groups; g += stride {
		i := g*f.groupWords + uint64(slot)*sectorWords
		match := 1.0
		for _, k := range ks {
			c := countValid(f.sector(i), tag)
			set += uint64(c)
			match *= math.Pow(float64(c)/UsableSectorBits, float64(k))
			i += f.sectorStride
		}
		exact += match
		groups++
	}
	lambda := keysPerGroup(float64(set)/float64(groups), ks)
	gs := GenerationStats{
		Fill:          float64(set) / float64(groups*uint64(f.sectors)*UsableSectorBits),
		EstimatedKeys: lambda * float64(f.groups),
		EstimatedFPR:  exact / float64(groups),
	}
	if stride > 1 {
		gs.EstimatedFPR = poissonLoadFPR(lambda, ks)
	}
	return gs
}

// countValid returns the number of data bits set in the words of b that carry tag; words of an
// earlier use read as empty.
func countValid(b *[sectorWords]uint64, tag uint64) int {
	c := 0
	for w := range b {
		if x := atomic.LoadUint64(&b[w]); x&tagBit == tag {
			c += bits.OnesCount64(x & dataMask)
		}
	}
	return c
}

// expectedSetBits returns the expected number of set data bits of a group that holds
// Poisson(lambda) keys, each setting ks[s] bits of sector s at uniformly random positions: a bit
// of sector s stays clear with probability exp(-λ·(1 - (1 - 1/B)^ks[s])), B = UsableSectorBits.
func expectedSetBits(lambda float64, ks []int) float64 {
	var n float64
	for _, k := range ks {
		hit := -math.Expm1(float64(k) * math.Log1p(-1.0/UsableSectorBits)) // 1-(1-1/B)^k
		n += UsableSectorBits * -math.Expm1(-lambda*hit)
	}
	return n
}

// keysPerGroup inverts expectedSetBits: the mean number of keys per group that leaves setBits
// data bits set per group on average (+Inf for a full group).
func keysPerGroup(setBits float64, ks []int) float64 {
	if setBits <= 0 {
		return 0
	}
	if setBits >= float64(len(ks)*UsableSectorBits) {
		return math.Inf(1)
	}
	lo, hi := 0.0, 1.0
	for expectedSetBits(hi, ks) < setBits {
		hi *= 2
		if math.IsInf(hi, 1) {
			return hi
		}
	}
	for range 64 {
		mid := (lo + hi) / 2
		if expectedSetBits(mid, ks) < setBits {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// poissonLoadFPR returns the false-positive rate of a generation whose groups hold Poisson(lambda)
// keys: Σ_j P(j keys) ∏_s E[(c_s/B)^ks[s] | j keys], with the exact distribution of the number
// c_s of distinct bits that j·ks[s] uniformly random positions set (matchGivenKeys).
func poissonLoadFPR(lambda float64, ks []int) float64 {
	if lambda <= 0 {
		return 0
	}
	if math.IsInf(lambda, 1) {
		return 1
	}
	sd := math.Sqrt(lambda)
	lo := int(max(0, math.Floor(lambda-12*sd-30)))
	hi := int(math.Ceil(lambda + 12*sd + 30))
	logLambda := math.Log(lambda)
	var sum float64
	for j := lo; j <= hi; j++ {
		lg, _ := math.Lgamma(float64(j) + 1)
		p := math.Exp(float64(j)*logLambda - lambda - lg)
		if p == 0 {
			continue
		}
		for _, k := range ks {
			p *= matchGivenKeys(k, j)
		}
		sum += p
	}
	return min(sum, 1)
}

// matchTables caches, per bits per sector k, the table matchGivenKeys reads: int → []float64.
var matchTables sync.Map

// matchTableKeys is how many keys per group the tables cover for k bits per sector: enough
// positions (8·B) that a sector is all but full (every bit set with probability > 0.9996), where
// (expected fill)^k is exact to a few parts in 10^4.
func matchTableKeys(k int) int { return 8*UsableSectorBits/k + 1 }

// matchGivenKeys returns E[(c/B)^k] for a sector into which j keys each set k bits at uniformly
// random positions (with replacement), c being the number of distinct bits set and B
// UsableSectorBits: the chance that a further key's k bits all fall on set bits. The distribution
// of c is computed exactly (one bit more or not, position by position) once per k; past the
// table, where the sector is all but full, it uses the expected fill.
func matchGivenKeys(k, j int) float64 {
	t, ok := matchTables.Load(k)
	if !ok {
		t, _ = matchTables.LoadOrStore(k, newMatchTable(k))
	}
	table := t.([]float64)
	if j < len(table) {
		return table[j]
	}
	fill := -math.Expm1(float64(j*k) * math.Log1p(-1.0/UsableSectorBits))
	return math.Pow(fill, float64(k))
}

// newMatchTable returns E[(c/B)^k | j keys] for j = 0 .. matchTableKeys(k).
func newMatchTable(k int) []float64 {
	const b = UsableSectorBits
	pow := make([]float64, b+1) // (c/B)^k
	for c := range pow {
		pow[c] = math.Pow(float64(c)/b, float64(k))
	}
	dist := make([]float64, b+1) // P(c bits set), c = 0..B
	dist[0] = 1
	table := make([]float64, matchTableKeys(k)+1)
	for j := range table {
		var e float64
		for c, p := range dist {
			e += p * pow[c]
		}
		table[j] = e
		for range k { // one more position: a clear bit becomes set with probability (B-c)/B
			for c := b; c >= 0; c-- {
				stay := dist[c] * float64(c) / b
				if c > 0 {
					stay += dist[c-1] * float64(b-c+1) / b
				}
				dist[c] = stay
			}
		}
	}
	return table
}
