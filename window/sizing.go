package window

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// SectorBits is the size of one sector: a 64-byte cache line of eight 64-bit words. The top bit
// of every word is its use tag (see the package documentation), so a sector holds
// UsableSectorBits bits of data.
const SectorBits = 512

// UsableSectorBits is the number of data bits in a sector: 63 of every 64.
const UsableSectorBits = SectorBits / 64 * 63

const (
	sectorWords = SectorBits / 64
	wordBits    = 63 // data bits per word; bit 63 is the tag
	tagBit      = uint64(1) << 63
	dataMask    = tagBit - 1
)

// MaxSectors is the largest number of sectors a generation's block is split into.
const MaxSectors = 6

// MaxGenerations is the largest number of generations a Filter accepts.
const MaxGenerations = 1024

// DefaultMaxBytes is the memory cap Size and New apply when Config.MaxBytes is zero: 8 GiB.
const DefaultMaxBytes = 8 << 30

// maxK bounds the number of bits a key sets in one generation.
const maxK = 48

// sectorGain is how much memory a further sector must save for Size to use it: each sector is
// another cache line that an insert writes and a hit reads.
const sectorGain = 0.05

// Config describes a sliding-window filter. The zero value is not usable: Generations, Interval,
// Capacity and FalsePositiveRate must be set. A Config is a plain value and safe to copy.
type Config struct {
	// Generations is N, the number of rotating generations. A key added at time t is reported as
	// seen until at least t + (N-1)·Interval and never after t + N·Interval. It must be in
	// [1, MaxGenerations].
	Generations int

	// Interval is the length of one generation. It must be positive.
	Interval time.Duration

	// Capacity is the expected number of distinct keys added per Interval: the size of each
	// generation's first stage, not a hard limit. A generation that takes more keys grows (see
	// the package documentation). It must be positive, except with Auto.
	Capacity uint64

	// Auto sizes each generation from the load observed (see auto.go): Capacity is then only the
	// size of stage 0, the least any generation holds (AutoCapacity when zero), and each
	// generation's further stages are sized from the keys the generation before it took and the
	// rate at which the generation itself takes them, with AutoHeadroom. Default: false (every
	// generation sized for Capacity).
	Auto bool

	// FalsePositiveRate is the target probability that a key never added is reported as seen,
	// over the whole window (all N generations full at Capacity). It must be in (0, 1).
	FalsePositiveRate float64

	// MaxBytes caps the memory the filter may use: the N interleaved generations (stage 0) plus
	// every grown stage. Size fails if stage 0 alone does not fit; at the cap the filter stops
	// growing and Overload applies. Default: DefaultMaxBytes (8 GiB).
	MaxBytes uint64

	// Budget, when set, is a memory budget the filter shares with others (see Budget): stage 0 is
	// taken from it, every grown stage reserved from it, and a growth it refuses stops the
	// generation as MaxBytes does. Size fails if stage 0 alone exceeds its Limit. Default: nil,
	// the filter is bounded by MaxBytes alone.
	Budget *Budget

	// Overload says what happens to new keys when the memory cap or the Budget stops a generation
	// from growing and its last stage is full. Default: OverloadDrop.
	Overload OverloadPolicy

	// Seed seeds the key hash. Keep it secret to stop an adversary from crafting keys that collide
	// with other keys; it is kept in snapshots so that a restored filter hashes identically.
	// Default: 0, a valid public seed.
	Seed uint64

	// SingleWriter selects the single-writer write path: TestAndAdd and testAndAddHash set bits
	// with plain loads and stores instead of atomic read-modify-write instructions and take no
	// claim. Set it only when calls to TestAndAdd and testAndAddHash never overlap in time (one
	// goroutine writes the filter, as in kdedup's per-partition scope); Test, snapshots, Stats and
	// rotation may still run concurrently from any goroutine. Overlapping TestAndAdd calls on a
	// single-writer filter can lose keys and report a key new twice. It does not change the layout:
	// a snapshot restores into either mode. Default: false (any number of concurrent writers).
	SingleWriter bool

	// Clock returns the current time and drives rotation. Default: time.Now.
	Clock func() time.Time

	// WallClock is the clock Restore checks a snapshot's generations against (a snapshot cannot
	// come from the future): the wall clock even when Clock is a stream's event time. Default:
	// time.Now.
	WallClock func() time.Time
	// Ahead is how far the filter's time may legitimately run ahead of WallClock (event time:
	// records stamped in the future, up to the caller's cap); Restore allows it on top of one
	// interval and MaxClockSkew. Default: 0.
	Ahead time.Duration
}

// OverloadPolicy says what a filter does with new keys once its memory cap stops it from growing
// and the last stage of the current generation is full.
type OverloadPolicy int

const (
	// OverloadDrop keeps adding new keys to the full last stage: every key is remembered, and the
	// false-positive rate rises above the target (real events may be reported as seen).
	OverloadDrop OverloadPolicy = iota
	// OverloadPass stops adding new keys to a full last stage at the cap: the false-positive
	// rate stays at the target, and a later duplicate of a key that was not added is reported new.
	OverloadPass
)

// String returns "drop" or "pass".
func (p OverloadPolicy) String() string {
	if p == OverloadPass {
		return "pass"
	}
	return "drop"
}

// Sizing is the memory layout derived from a Config by Size.
type Sizing struct {
	// Generations is N.
	Generations int
	// Slots is the number of generation slots per key group: N, one per live generation. A slot
	// that expires is reused at once by the next generation (see the package documentation).
	Slots int
	// Sectors is S, the number of cache-line sectors one generation's block is split into. A key
	// sets FirstBits of its bits in one word of sector 0 and spreads the others evenly over the
	// words of sectors 1 … S-1 (the first (K-FirstBits) mod (S-1) of them get one more).
	Sectors int
	// SectorBits is the size of a sector in bits (SectorBits), including its eight tag bits.
	SectorBits int
	// K is the number of bits a key sets in one generation, over all its sectors.
	K int
	// FirstBits is how many of the K bits go to one word of sector 0 (the word the key's pattern
	// picks among the sector's eight); the other K-FirstBits spread over sectors 1 … S-1.
	FirstBits int
	// Groups is the number of key groups; a key hashes to one group and uses one block of S
	// sectors of it per generation.
	Groups uint64
	// BitsPerGeneration is the memory of one generation in bits: Groups × Sectors × SectorBits.
	BitsPerGeneration uint64
	// BitsPerKey is BitsPerGeneration / Capacity.
	BitsPerKey float64
	// TotalBytes is the memory the filter allocates: all slots plus one claim word per group.
	TotalBytes uint64
	// GenerationFPR is the predicted false-positive rate of one generation holding Capacity keys
	// in stage 0: at most (1-GrowthShare)·ShareFPR. It is read from the sizing table (layoutRate),
	// within a relative 1e-4 of the Poisson model.
	GenerationFPR float64
	// PredictedFPR is the predicted false-positive rate of the window when all N generations hold
	// Capacity keys: at most (1-GrowthShare)·FalsePositiveRate, about 0.88 of it.
	PredictedFPR float64
	// ShareFPR is p_g = 1-(1-p)^(1/N), each generation's share of the target rate: stage 0 takes
	// (1-GrowthShare) of it at Capacity, and a grown generation's stages the rest.
	ShareFPR float64
	// GrowAt is the number of keys a generation's stage 0 takes before further keys go to a grown
	// stage: Capacity. A generation grows only once it has taken more than Capacity keys.
	GrowAt uint64
}

// sectorKs returns sectorBits of every sector.
func (s Sizing) sectorKs() []int {
	ks := make([]int, s.Sectors)
	for i := range ks {
		ks[i] = s.sectorBits(i)
	}
	return ks
}

// sectorBits returns how many of the K bits a key sets in sector i of a block.
func (s Sizing) sectorBits(i int) int {
	if i == 0 {
		return s.FirstBits
	}
	rest, n := s.K-s.FirstBits, s.Sectors-1
	if i-1 < rest%n {
		return rest/n + 1
	}
	return rest / n
}

// Errors returned by Size and New for bad configuration. They are wrapped with details; test for
// them with errors.Is.
var (
	ErrConfig = errors.New("window: invalid configuration")
	ErrMemory = errors.New("window: memory cap exceeded")
)

// Size validates cfg and derives the filter layout. It never allocates the filter. On a bad Config
// it returns an error wrapping ErrConfig (or ErrMemory when the layout exceeds the memory cap) that
// names every problem found.
//
// A key is tested against every active generation, so each generation gets a share
// p_g = 1-(1-p)^(1/N) of the target: the union of N generations then stays at or under p. Stage 0
// is sized so that its rate at Capacity keys is (1-GrowthShare)·p_g, which leaves GrowthShare·p_g
// to the stages a generation grows beyond Capacity (see the package documentation); it costs
// about log2(1/(1-GrowthShare))/log2(1/p_g) more bits than sizing stage 0 for p_g (1.5% at
// p_g = 1.25e-4). The per-generation rate of a sectorized blocked filter is computed exactly from
// the Poisson distribution of keys per group and the distribution of set bits per sector
// (poissonLoadFPR), not from the textbook formula, which underestimates it. The
// number of sectors S is the smallest in 1..MaxSectors whose successor would save less than 5%
// memory: every sector is another cache line that an insert writes and a hit reads.
func Size(cfg Config) (Sizing, error) {
	cfg = cfg.withAuto()
	if err := validate(cfg); err != nil {
		return Sizing{}, err
	}
	n, p := cfg.Generations, cfg.FalsePositiveRate
	pg := -math.Expm1(math.Log1p(-p) / float64(n)) // 1-(1-p)^(1/N), accurate for tiny p
	target := stage0Share(cfg) * pg                // stage 0's rate at Capacity: the rest is the stages'
	bp := bestLayout(target)
	groups := max(uint64(math.Ceil(float64(cfg.Capacity)/bp.lambda)), 1)
	s := Sizing{
		Generations:       n,
		Slots:             n,
		Sectors:           bp.sectors,
		SectorBits:        SectorBits,
		K:                 bp.k,
		FirstBits:         bp.first,
		Groups:            groups,
		BitsPerGeneration: groups * uint64(bp.sectors) * SectorBits,
	}
	s.BitsPerKey = float64(s.BitsPerGeneration) / float64(cfg.Capacity)
	s.GenerationFPR = layoutRate(bp, target, float64(cfg.Capacity)/float64(groups))
	s.PredictedFPR = -math.Expm1(float64(n) * math.Log1p(-s.GenerationFPR))
	s.ShareFPR = pg
	s.GrowAt = cfg.Capacity

	maxBytes := capBytes(cfg)
	// groups × perGroup must not overflow and must fit under the cap.
	perGroup := uint64(s.Slots)*uint64(s.Sectors)*SectorBits/8 + 8
	if groups > maxBytes/perGroup {
		return s, fmt.Errorf("%w: %d generations of %d keys at false-positive rate %g need %d bytes, cap is %d bytes (raise the cap, or lower capacity, generations or precision)",
			ErrMemory, n, cfg.Capacity, p, saturatingMul(groups, perGroup), maxBytes)
	}
	s.TotalBytes = groups * perGroup
	return s, nil
}

// capBytes returns the most memory a filter of cfg may hold: Config.MaxBytes (DefaultMaxBytes
// when zero), or the Budget's limit when that is lower.
func capBytes(cfg Config) uint64 {
	c := cfg.MaxBytes
	if c == 0 {
		c = DefaultMaxBytes
	}
	if cfg.Budget != nil {
		c = min(c, cfg.Budget.Limit())
	}
	return c
}

// validate reports every problem with cfg at once, wrapped in ErrConfig.
func validate(cfg Config) error {
	var errs []error
	if cfg.Generations < 1 || cfg.Generations > MaxGenerations {
		errs = append(errs, fmt.Errorf("generations must be in [1, %d], got %d", MaxGenerations, cfg.Generations))
	}
	if cfg.Interval <= 0 {
		errs = append(errs, fmt.Errorf("interval must be > 0, got %v", cfg.Interval))
	}
	if cfg.Capacity == 0 {
		errs = append(errs, errors.New("capacity must be > 0"))
	}
	p := cfg.FalsePositiveRate
	if !(p > 0 && p < 1) { // also rejects NaN
		errs = append(errs, fmt.Errorf("false-positive rate must be in (0, 1), got %v", p))
	} else if p < 1e-15 {
		errs = append(errs, fmt.Errorf("false-positive rate must be >= 1e-15, got %v", p))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

func saturatingMul(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
}

// layoutParams is a block layout for one per-generation target: sectors, bits per key, of which
// first in one word of sector 0, and the largest mean number of keys per group that stays at or
// under the target.
type layoutParams struct {
	sectors, k, first int
	lambda            float64
}

// ks returns the bits a key sets in each sector (Sizing.sectorBits).
func (lp layoutParams) ks() []int {
	return (Sizing{K: lp.k, Sectors: lp.sectors, FirstBits: lp.first}).sectorKs()
}

// maxFirst bounds layoutParams.first: more bits than this in one 63-bit word never pay.
const maxFirst = 16

// layouts memoises bestLayout.
var layouts sync.Map // float64 target → layoutParams

// bestLayout returns the layout Size uses for a per-generation false-positive rate target: the one
// searchLayout finds, read from the table of layoutfast.go in a microsecond for targets in its
// range (with a λ up to 2·layoutMargin lower), else searched.
func bestLayout(target float64) layoutParams {
	if v, ok := layouts.Load(target); ok {
		return v.(layoutParams)
	}
	best, ok := tableLayout(target)
	if !ok {
		best = searchLayout(target)
	}
	layouts.Store(target, best)
	return best
}

// searchLayout returns, for a per-generation target, for each number of sectors the split of bits
// that holds the most keys per group at the target (searchParams), and of those the fewest
// sectors whose successor would save less than sectorGain of the memory. The rate of a layout is
// the exact Poisson model of poissonLoadFPR, the one Stats uses. It takes tens of milliseconds.
func searchLayout(target float64) layoutParams {
	var best layoutParams
	for sectors := 1; sectors <= MaxSectors; sectors++ {
		lp := searchParams(target, sectors)
		// Memory per key is proportional to sectors/lambda; a further sector must save at least
		// sectorGain of it, or the search stops.
		if best.sectors != 0 && float64(sectors)/lp.lambda > (1-sectorGain)*float64(best.sectors)/best.lambda {
			break
		}
		best = lp
	}
	return best
}

// searchParams returns the split of bits over a block of the given number of sectors that holds
// the most keys per group at the target. The keys a layout holds rise and then fall with the bits
// in sector 0's word and with the bits in the other sectors, so each search stops after a few
// splits that do worse than the best.
func searchParams(target float64, sectors int) layoutParams {
	best := layoutParams{sectors: sectors, k: sectors, first: 1, lambda: 1e-3}
	worse := 0
	for first := 1; first <= maxFirst && worse < 2; first++ {
		lp := layoutParams{sectors: sectors, first: first, k: first}
		if sectors > 1 {
			lp = bestRest(target, sectors, first)
		} else {
			lp.lambda = maxLambda(target, lp.ks(), 0)
		}
		if lp.lambda > best.lambda {
			best, worse = lp, 0
		} else {
			worse++
		}
	}
	return best
}

// bestRest returns, for a block of sectors ≥ 2 sectors with first bits in sector 0's word, the
// number of further bits that holds the most keys per group at the target.
func bestRest(target float64, sectors, first int) layoutParams {
	best := layoutParams{sectors: sectors, first: first, k: first + sectors - 1}
	worse := 0
	for k := first + sectors - 1; k <= maxK && worse < 3; k++ {
		lp := layoutParams{sectors: sectors, first: first, k: k}
		lp.lambda = maxLambda(target, lp.ks(), best.lambda)
		if lp.lambda > best.lambda {
			best, worse = lp, 0
		} else {
			worse++
		}
	}
	return best
}

// maxLambda returns the largest mean number of keys per group at which a generation whose keys
// set ks[s] bits in sector s stays at or under the target (0 if none does), or a value at most
// floor when that is not above floor.
func maxLambda(target float64, ks []int, floor float64) float64 {
	if floor > 0 && poissonLoadFPR(floor, ks) > target {
		return floor
	}
	lo, hi := floor, max(2*floor, 1.0)
	for poissonLoadFPR(hi, ks) <= target {
		lo, hi = hi, 2*hi
		if hi > 1e6 {
			return lo
		}
	}
	for range 50 {
		mid := (lo + hi) / 2
		if poissonLoadFPR(mid, ks) <= target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// Growth sizing: the stages a generation grows beyond stage 0, and the fill counters.

// GrowthShare is ε, the share of a generation's false-positive budget that its grown stages may
// use together. Stage 0 is sized for (1-ε) of the generation's share p_g of the target at
// Capacity keys and takes no more, and stage i ≥ 1 is sized for ε·p_g·2^-i, so the generation's
// rate stays at or under (1-ε)·p_g + ε·p_g·Σ2^-i < p_g at any load.
const GrowthShare = 1.0 / 8

// maxShardBits bounds the number of fill-counter shards per stage: 64.
const maxShardBits = 6

// keysPerShard is the least number of keys a fill-counter shard should hold before the filter
// splits its count further. Keys spread over shards by chance (Poisson): a grown stage's shard is
// full at its share of the stage's capacity, so its first shard fills early by about two standard
// deviations of its count, and 4096 keys per shard keep that under 3%. Stage 0 counts its shards
// against GrowAt together (see Filter.insert), so it is full at GrowAt exactly.
const keysPerShard = 4096

// stageLayout is the layout of stage i ≥ 1 of a generation.
type stageLayout struct {
	index    int
	groups   uint64
	layout   layoutParams
	capacity uint64
	target   float64
	bytes    uint64
}

// stageLayout returns the layout of stage i ≥ 1: capacity Capacity·2^(i-1) at false-positive rate
// GrowthShare·p_g·2^-i, p_g being what stage 0 is sized for.
func (f *Filter) stageLayout(i int) stageLayout {
	return growthStage(f.cfg.Capacity, f.sizing.ShareFPR, i, f.shardBits)
}

func growthStage(capacity uint64, share float64, i int, shardBits uint) stageLayout {
	c := capacity << (i - 1)
	if i-1 >= 64 || c>>(i-1) != capacity {
		c = math.MaxUint64 / 2
	}
	return stageFor(c, GrowthShare*share*math.Ldexp(1, -i), i, shardBits)
}

// stageFor returns the layout of stage i that holds capacity keys at the false-positive rate
// target, with 2^shardBits fill counters.
func stageFor(capacity uint64, target float64, i int, shardBits uint) stageLayout {
	bp := bestLayout(target)
	groups := max(uint64(math.Ceil(float64(capacity)/bp.lambda)), 1)
	return stageLayout{
		index: i, groups: groups, layout: bp, capacity: capacity, target: target,
		bytes: stageBytes(groups, bp.sectors, shardBits),
	}
}

// stageBytes returns the memory of a stage of groups blocks of sectors sectors and its fill
// counters (saturating).
func stageBytes(groups uint64, sectors int, shardBits uint) uint64 {
	b := saturatingMul(groups, uint64(sectors)*SectorBits/8)
	return min(b, math.MaxUint64-64<<shardBits) + 64<<shardBits
}

// shardLayout returns how many bits of a stage hash select a fill-counter shard for a stage 0
// that is full at growAt keys: up to 64 shards, each holding at least keysPerShard keys.
func shardLayout(growAt uint64) uint {
	b := uint(0)
	for b < maxShardBits && growAt>>(b+1) >= keysPerShard {
		b++
	}
	return b
}

// GrowthCost returns the memory one generation of a filter for cfg takes when it receives
// load × Capacity distinct keys in its interval: its share of stage 0 (TotalBytes / N) plus the
// grown stages that many keys need, and the number of those stages. It ignores the memory cap
// and the early growth of a grown stage's fill-counter shard that fills before the others (a few
// percent of the stage's capacity), and allocates nothing. It returns Size's error for a bad cfg.
func GrowthCost(cfg Config, load float64) (bytes uint64, stages int, err error) {
	s, err := Size(cfg)
	if err != nil {
		return 0, 0, err
	}
	bytes = s.TotalBytes / uint64(s.Slots)
	keys := load * float64(cfg.Capacity)
	room := float64(s.GrowAt)
	shardBits := shardLayout(s.GrowAt)
	for i := 1; room < keys && i < 64; i++ {
		l := growthStage(cfg.Capacity, s.ShareFPR, i, shardBits)
		bytes += l.bytes
		room += float64(l.capacity)
		stages = i
	}
	return bytes, stages, nil
}
