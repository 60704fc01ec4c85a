package window

import (
	"math"
	"math/bits"
	"runtime"
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
	// ResidentBytes is the part of TotalBytes the filter has written, and so holds resident when
	// its memory came fresh from the kernel: stage 0's pages as keys reach them (all of them once
	// a sweep of an odd use or a restore of a single-file snapshot wrote every word, see
	// populate.go), the claim words in shared mode, and every grown stage whole. Memory the Go
	// heap reused may be resident without being written.
	ResidentBytes uint64
	// MaxBytes is the memory cap (Config.MaxBytes, or DefaultMaxBytes; the Budget's limit when lower).
	MaxBytes uint64
	// Stages is the number of grown stages (beyond stage 0) of the live generations; with
	// Config.Auto, beyond stage 1 (the stage sized from the load), as GenerationStats.Stages.
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
	// Forgotten counts the new keys that were not remembered because the memory cap stopped the
	// generation from growing under OverloadPass (their duplicates pass), since the filter was
	// created (not carried by snapshots).
	Forgotten uint64
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
	// Keys is the number of new keys the generation took, counted as they arrived (stage 0's
	// fill counters and its stages' together): the observed load that auto sizing follows
	// (Config.Auto). Unlike EstimatedKeys it is exact but for keys a late record added to a
	// generation that never grew (see writeOld).
	Keys uint64
	// Stages is the number of grown stages of the generation (0 while it is within Capacity).
	// With Config.Auto, stage 1, sized from the load, is not counted: Stages counts the stages
	// the generation needed beyond it.
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
	defer runtime.KeepAlive(f) // its stage 0 is unmapped when it is collected (newFilter)
	v := f.view.Load()
	now := f.cfg.Clock()
	st := Stats{
		ConfiguredFPR: f.cfg.FalsePositiveRate,
		CapacityBits:  uint64(f.cfg.Generations) * f.sizing.BitsPerGeneration,
		TotalBytes:    f.sizing.TotalBytes + uint64(max(f.stageBytes.Load(), 0)),
		MaxBytes:      f.maxBytes,
		ResidentBytes: f.residentBytes(),
		Growths:       f.growths.Load(),
		Refreshes:     atomic.LoadUint64(&f.refreshes.n),
		Forgotten:     f.forgotten.Load(),
		Rotations:     f.rotations.Load(),
		Generations:   make([]GenerationStats, 0, len(v.active)),
	}
	st.Window = now.Sub(f.startOf(v.epochs[len(v.epochs)-1]))
	stride := max(f.groups/f.statsSample, 1)
	miss := 1.0
	for i, slot := range v.active {
		gs := f.generationStats(slot, stride)
		gs.Epoch = v.epochs[i]
		gs.Start = f.startOf(gs.Epoch)
		gs.Keys = f.slotKeys(slot, gs.Epoch)
		f.addStageStats(&st, &gs)
		miss *= 1 - gs.EstimatedFPR
		st.Generations = append(st.Generations, gs)
	}
	st.EstimatedFPR = 1 - miss
	return st
}

// residentBytes returns Stats.ResidentBytes: TotalBytes less the pages of stage 0 not written
// yet and, with a single writer, the claim words it never touches.
func (f *Filter) residentBytes() uint64 {
	total := f.sizing.TotalBytes + uint64(max(f.stageBytes.Load(), 0))
	unwritten := uint64(len(f.words))*8 - f.writtenBytes()
	if f.single {
		unwritten += uint64(len(f.claims)) * 8
	}
	return total - min(unwritten, total)
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
		keys, fpr := sg.stats(f.statsSample)
		gs.EstimatedKeys += keys
		miss *= 1 - fpr
		if !f.cfg.Auto || sg.index > 1 {
			gs.Stages++
			st.Stages++
		}
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
// computed as generationStats does (exactly when every group is read, else from the load): it
// reads at most sample groups.
func (sg *stage) stats(sample uint64) (keys, fpr float64) {
	stride := max(sg.groups/sample, 1)
	set, groups, exact := sg.slotFill(0, 0, stride)
	ks := sg.ks[:sg.sectors]
	lambda := keysPerGroup(float64(set)/float64(groups), ks)
	if stride > 1 {
		return lambda * float64(sg.groups), poissonLoadFPR(lambda, ks)
	}
	return lambda * float64(sg.groups), exact / float64(groups)
}

// generationStats reads every stride-th group of a slot's generation (see Stats).
func (f *Filter) generationStats(slot int, stride uint64) GenerationStats {
	set, groups, exact := f.slotFill(slot, tagOf(f.uses[slot].Load()), stride)
	ks := f.ks[:f.sectors]
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

// slotFill reads every stride-th group of slot s, counting only words that carry tag, and returns
// the data bits set, the groups read, and the sum over them of the chance that a key never added
// matches: the mean over sector 0's words of (c_w/wordBits)^ks[0], times (c_s/UsableSectorBits)^ks[s]
// for each further sector, c being the bits set. The powers come from tables built once per (k,
// bits) and kept (cachedPowTable), so a group costs its bit counts and a few lookups.
func (b *blocks) slotFill(s int, tag, stride uint64) (set, groups uint64, exact float64) {
	var pow [MaxSectors][]float64
	pow[0] = cachedPowTable(b.ks[0], wordBits)
	for sec := 1; sec < b.sectors; sec++ {
		pow[sec] = cachedPowTable(b.ks[sec], UsableSectorBits)
	}
	for g := uint64(0); g < b.groups; g += stride {
		base := g * b.groupWords
		var first float64
		for w := range uint64(sectorWords) {
			c := validBits(&b.words[base+w*uint64(b.slots)+uint64(s)], tag)
			set += uint64(c)
			first += pow[0][c]
		}
		match := first / sectorWords
		for sec := 1; sec < b.sectors; sec++ {
			sw := b.sector(b.restSector(base, s, sec))
			c := 0
			for w := range sw {
				c += validBits(&sw[w], tag)
			}
			set += uint64(c)
			match *= pow[sec][c]
		}
		exact += match
		groups++
	}
	return set, groups, exact
}

// powTables holds the tables of cachedPowTable by [k, bits]; a table is never written once stored.
var powTables sync.Map

// cachedPowTable returns powTable(k, bits), built once and shared: read-only, safe for concurrent
// use. Building the tables on every Stats call took most of the statistics' time for small filters
// (a worker of 1,000 partitions computes 1,000 filters' statistics per scrape).
func cachedPowTable(k, bits int) []float64 {
	key := [2]int{k, bits}
	if t, ok := powTables.Load(key); ok {
		return t.([]float64)
	}
	t, _ := powTables.LoadOrStore(key, powTable(k, bits))
	return t.([]float64)
}

// powTable returns (c/bits)^k for c = 0 .. bits.
func powTable(k, bits int) []float64 {
	t := make([]float64, bits+1)
	for c := range t {
		t[c] = math.Pow(float64(c)/float64(bits), float64(k))
	}
	return t
}

// validBits returns the number of data bits set in the word at w if it carries tag, else 0: a
// word of an earlier use reads as empty.
func validBits(w *uint64, tag uint64) int {
	if x := atomic.LoadUint64(w); x&tagBit == tag {
		return bits.OnesCount64(x & dataMask)
	}
	return 0
}

// The model of a block's fill and rate. A block is a word of sector 0 (wordBits data bits) that a
// key picks among the sector's eight, into which it sets ks[0] bits, and sectors 1 … len(ks)-1
// (UsableSectorBits data bits each), into which it sets ks[s] bits; every bit at a uniformly
// random position. A group holds Poisson(λ) keys; of j keys, a given word of sector 0 holds
// Binomial(j, 1/8), and of λ, Poisson(λ/8).

// hitChance returns the chance that a key setting k bits at random among b sets a given one:
// 1-(1-1/b)^k.
func hitChance(k, b int) float64 { return -math.Expm1(float64(k) * math.Log1p(-1.0/float64(b))) }

// expectedSetBits returns the expected number of set data bits of a group of one slot that holds
// Poisson(lambda) keys: a bit of a unit of b bits into which each of n keys sets k bits stays
// clear with probability exp(-n·hitChance(k, b)).
func expectedSetBits(lambda float64, ks []int) float64 {
	n := sectorWords * wordBits * -math.Expm1(-lambda/sectorWords*hitChance(ks[0], wordBits))
	for _, k := range ks[1:] {
		n += UsableSectorBits * -math.Expm1(-lambda*hitChance(k, UsableSectorBits))
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
// keys: Σ_j P(j keys) · firstMatch(ks[0], j) · ∏_{s≥1} E[(c_s/B)^ks[s] | j keys], with the exact
// distribution of the number c_s of distinct bits that j·ks[s] uniformly random positions set
// (matchGivenKeys).
func poissonLoadFPR(lambda float64, ks []int) float64 {
	if lambda <= 0 {
		return 0
	}
	if math.IsInf(lambda, 1) {
		return 1
	}
	var tables [MaxSectors][]float64
	tables[0] = firstTable(ks[0])
	for s, k := range ks[1:] {
		tables[s+1] = matchTable(k, UsableSectorBits)
	}
	sd := math.Sqrt(lambda)
	lo := int(max(0, math.Floor(lambda-12*sd-30)))
	hi := int(math.Ceil(lambda + 12*sd + 30))
	pj := math.Exp(float64(lo)*math.Log(lambda) - lambda - logFactorial(lo)) // P(lo keys)
	var sum float64
	for j := lo; j <= hi; j++ {
		if j > lo {
			pj *= lambda / float64(j)
		}
		p := pj * lookupMatch(tables[0], ks[0], j, sectorWords*wordBits)
		for s, k := range ks[1:] {
			p *= lookupMatch(tables[s+1], k, j, UsableSectorBits)
		}
		sum += p
	}
	return min(sum, 1)
}

// logFactorials returns the cache of log(j!) for j < len, built at its first use rather than at
// package init (128 KiB and 16k logarithms that a process which never estimates a rate skips).
// It is safe for concurrent use.
var logFactorials = sync.OnceValue(func() []float64 {
	t := make([]float64, 1<<14)
	for j := 1; j < len(t); j++ {
		t[j] = t[j-1] + math.Log(float64(j))
	}
	return t
})

// logFactorial returns log(j!).
func logFactorial(j int) float64 {
	if t := logFactorials(); j < len(t) {
		return t[j]
	}
	lg, _ := math.Lgamma(float64(j) + 1)
	return lg
}

// matchTables caches, per unit (0: a word of wordBits bits, 1: a sector of UsableSectorBits)
// and bits per unit k, the table matchGivenKeys reads; firstTables, per k, firstMatch's.
var matchTables [2][maxK + 1]atomic.Pointer[[]float64]
var firstTables [maxK + 1]atomic.Pointer[[]float64]

// matchTableKeys is how many keys the tables cover for k bits per unit of b bits: enough positions
// (8·b) that the unit is all but full (every bit set with probability > 0.9996), where
// (expected fill)^k is exact to a few parts in 10^4.
func matchTableKeys(k, b int) int { return 8*b/k + 1 }

// matchGivenKeys returns E[(c/b)^k] for a unit of b data bits (a sector, b = UsableSectorBits, or
// a word, b = wordBits) into which j keys each set k bits at uniformly random positions (with
// replacement), c being the number of distinct bits set: the chance that a further key's k bits
// all fall on set bits. The distribution of c is computed exactly (one bit more or not, position
// by position) once per k and b; past the table, where the unit is all but full, it uses the
// expected fill.
func matchGivenKeys(k, j, b int) float64 { return lookupMatch(matchTable(k, b), k, j, b) }

// lookupMatch returns table[j] of a table of matchGivenKeys (or firstMatch, with b the bits of the
// eight words) or, past it, (expected fill)^k.
func lookupMatch(table []float64, k, j, b int) float64 {
	if j < len(table) {
		return table[j]
	}
	return math.Pow(-math.Expm1(float64(j*k)*math.Log1p(-1.0/float64(b))), float64(k))
}

// matchTable returns the table of matchGivenKeys for k and b, computing it on first use.
func matchTable(k, b int) []float64 {
	unit := 1
	if b == wordBits {
		unit = 0
	}
	slot := &matchTables[unit][k]
	if t := slot.Load(); t != nil {
		return *t
	}
	t := newMatchTable(k, b)
	slot.CompareAndSwap(nil, &t)
	return *slot.Load()
}

// newMatchTable returns E[(c/b)^k | j keys] for j = 0 .. matchTableKeys(k, b).
func newMatchTable(k, b int) []float64 {
	pow := make([]float64, b+1) // (c/b)^k
	for c := range pow {
		pow[c] = math.Pow(float64(c)/float64(b), float64(k))
	}
	dist := make([]float64, b+1) // P(c bits set), c = 0..b
	dist[0] = 1
	table := make([]float64, matchTableKeys(k, b)+1)
	for j := range table {
		var e float64
		for c, p := range dist {
			e += p * pow[c]
		}
		table[j] = e
		for range k { // one more position: a clear bit becomes set with probability (b-c)/b
			for c := b; c >= 0; c-- {
				stay := dist[c] * float64(c) / float64(b)
				if c > 0 {
					stay += dist[c-1] * float64(b-c+1) / float64(b)
				}
				dist[c] = stay
			}
		}
	}
	return table
}

// firstMatch returns the chance that a key's k bits in its word of sector 0 are all set when the
// group holds j keys: E over i ~ Binomial(j, 1/8) keys in that word of matchGivenKeys(k, i,
// wordBits). Past its table, where every word is all but full, it uses the expected fill, that of
// j keys setting k bits each among the eight words' bits.
func firstMatch(k, j int) float64 { return lookupMatch(firstTable(k), k, j, sectorWords*wordBits) }

// firstTable returns the table of firstMatch for k, computing it on first use.
func firstTable(k int) []float64 {
	slot := &firstTables[k]
	if t := slot.Load(); t != nil {
		return *t
	}
	t := newFirstTable(k)
	slot.CompareAndSwap(nil, &t)
	return *slot.Load()
}

// newFirstTable returns firstMatch(k, j) for j = 0 .. sectorWords·matchTableKeys(k, wordBits).
func newFirstTable(k int) []float64 {
	table := make([]float64, sectorWords*matchTableKeys(k, wordBits)+1)
	word := make([]float64, len(table)) // matchGivenKeys(k, i, wordBits) for every i used
	for i := range word {
		word[i] = matchGivenKeys(k, i, wordBits)
	}
	const q = 1 - 1.0/sectorWords
	for j := range table {
		pm := math.Pow(q, float64(j)) // P(i = 0), then by recurrence
		var e float64
		for i := 0; i <= j && (pm > 0 || i*sectorWords < j); i++ {
			if i > 0 {
				pm *= float64(j-i+1) / float64(i) / sectorWords / q
			}
			e += pm * word[i]
		}
		table[j] = e
	}
	return table
}
