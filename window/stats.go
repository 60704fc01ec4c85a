package window

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// statsSampleGroups is how many groups Stats reads per generation at most. Sampling keeps Stats
// cheap on multi-GiB filters; with 16384 blocks the fill estimate is within about 0.2% of the
// exact value.
const statsSampleGroups = 16384

// Stats describes the filter's state for metrics.
type Stats struct {
	// ConfiguredFPR is Config.FalsePositiveRate.
	ConfiguredFPR float64
	// EstimatedFPR is the false-positive rate a never-seen key faces now, derived from the fill of
	// the live generations. Above ConfiguredFPR it means more distinct keys arrive per interval than
	// Capacity: real events are being dropped as duplicates more often than planned.
	EstimatedFPR float64
	// CapacityBits is the number of bits of the N generations a key is tested against.
	CapacityBits uint64
	// TotalBytes is the memory the filter allocated.
	TotalBytes uint64
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
	// EstimatedFPR is the false-positive rate of this generation alone.
	EstimatedFPR float64
}

// Stats returns the filter's state. It reads at most statsSampleGroups blocks per generation, so it
// is cheap enough to call every few seconds, and it takes no lock: it never waits for a rotation
// or a snapshot, and writers continue meanwhile, so the numbers are a consistent-enough view for
// monitoring, not an exact count.
func (f *Filter) Stats() Stats {
	v := f.view.Load()
	now := f.cfg.Clock()
	st := Stats{
		ConfiguredFPR: f.cfg.FalsePositiveRate,
		CapacityBits:  uint64(f.cfg.Generations) * f.sizing.BitsPerGeneration,
		TotalBytes:    f.sizing.TotalBytes,
		Rotations:     f.rotations.Load(),
		Generations:   make([]GenerationStats, 0, len(v.active)),
	}
	st.Window = now.Sub(f.startOf(v.epochs[len(v.epochs)-1]))
	stride := f.groups / statsSampleGroups
	if stride == 0 {
		stride = 1
	}
	miss := 1.0
	for i, slot := range v.active {
		gs := f.generationStats(slot, stride)
		gs.Epoch = v.epochs[i]
		gs.Start = f.startOf(gs.Epoch)
		miss *= 1 - gs.EstimatedFPR
		st.Generations = append(st.Generations, gs)
	}
	st.EstimatedFPR = 1 - miss
	return st
}

func (f *Filter) generationStats(slot int, stride uint64) GenerationStats {
	tag := tagOf(f.uses[slot].Load())
	var set, groups uint64
	var fpr float64
	for g := uint64(0); g < f.groups; g += stride {
		i := g*f.groupWords + uint64(slot)*sectorWords
		match := 1.0
		for sec := range f.sectors {
			c := countValid(f.sector(i), tag)
			set += uint64(c)
			match *= math.Pow(float64(c)/UsableSectorBits, float64(f.ks[sec]))
			i += f.sectorStride
		}
		fpr += match
		groups++
	}
	fill := float64(set) / float64(groups*uint64(f.sectors)*UsableSectorBits)
	return GenerationStats{
		Fill:          fill,
		EstimatedKeys: estimateKeys(fill, f.sizing.K, f.sectors, f.groups),
		EstimatedFPR:  fpr / float64(groups),
	}
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

// estimateKeys inverts the expected fill of a generation: after n keys spread over groups blocks
// of the given number of sectors, each key setting k/sectors bits per sector, a bit is set with
// probability 1-(1-1/UsableSectorBits)^(k·n/(sectors·groups)).
func estimateKeys(fill float64, k, sectors int, groups uint64) float64 {
	if fill >= 1 {
		return math.Inf(1)
	}
	perSector := float64(k) / float64(sectors)
	return math.Log1p(-fill) / (perSector * math.Log1p(-1.0/UsableSectorBits)) * float64(groups)
}
