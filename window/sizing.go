package window

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// BlockBits is the size of one generation's block for one key group: a 64-byte cache line.
const BlockBits = 512

const blockWords = BlockBits / 64

// MaxGenerations is the largest number of generations a Filter accepts.
const MaxGenerations = 1024

// DefaultMaxBytes is the memory cap Size and New apply when Config.MaxBytes is zero: 8 GiB.
const DefaultMaxBytes = 8 << 30

// maxK bounds the number of bits a key sets in a block.
const maxK = 48

// Config describes a sliding-window filter. The zero value is not usable: Generations, Interval,
// Capacity and FalsePositiveRate must be set. A Config is a plain value and safe to copy.
type Config struct {
	// Generations is N, the number of rotating generations. A key added at time t is reported as
	// seen until at least t + (N-1)·Interval and never after t + N·Interval. It must be in
	// [1, MaxGenerations].
	Generations int

	// Interval is the length of one generation. It must be positive.
	Interval time.Duration

	// Capacity is the expected number of distinct keys added per Interval. Each generation is sized
	// for it. It must be positive.
	Capacity uint64

	// FalsePositiveRate is the target probability that a key never added is reported as seen,
	// over the whole window (all N generations full at Capacity). It must be in (0, 1).
	FalsePositiveRate float64

	// MaxBytes caps the memory the filter may use. Default: DefaultMaxBytes (8 GiB).
	MaxBytes uint64

	// Seed seeds the key hash. Keep it secret to stop an adversary from crafting keys that collide
	// with other keys; it is kept in snapshots so that a restored filter hashes identically.
	// Default: 0, a valid public seed.
	Seed uint64

	// Clock returns the current time and drives rotation. Default: time.Now.
	Clock func() time.Time
}

// Sizing is the memory layout derived from a Config by Size.
type Sizing struct {
	// Generations is N.
	Generations int
	// Slots is the number of blocks per key group: N active generations plus one spare that is
	// cleared in the background.
	Slots int
	// K is the number of bits a key sets in its block.
	K int
	// BlockBits is the block size in bits (BlockBits).
	BlockBits int
	// Groups is the number of key groups; a key hashes to one group and uses one block of it per
	// generation.
	Groups uint64
	// BitsPerGeneration is m, the number of bits of one generation.
	BitsPerGeneration uint64
	// BitsPerKey is BitsPerGeneration / Capacity.
	BitsPerKey float64
	// TotalBytes is the memory the filter allocates: all slots plus one claim word per group.
	TotalBytes uint64
	// GenerationFPR is the predicted false-positive rate of one full generation.
	GenerationFPR float64
	// PredictedFPR is the predicted false-positive rate of the window when all N generations hold
	// Capacity keys.
	PredictedFPR float64
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
// A key is tested against every active generation, so each generation is sized for a
// false-positive rate of 1-(1-p)^(1/N): the union of N full generations then stays at or under p.
// The per-generation rate of a blocked filter is computed exactly from the Poisson distribution of
// keys per block, not from the textbook formula, which underestimates it.
func Size(cfg Config) (Sizing, error) {
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
		return Sizing{}, fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}

	n := cfg.Generations
	pg := -math.Expm1(math.Log1p(-p) / float64(n)) // 1-(1-p)^(1/N), accurate for tiny p
	k, lambda := bestBlockParams(pg)
	groups := uint64(math.Ceil(float64(cfg.Capacity) / lambda))
	if groups == 0 {
		groups = 1
	}
	slots := n + 1
	s := Sizing{
		Generations:       n,
		Slots:             slots,
		K:                 k,
		BlockBits:         BlockBits,
		Groups:            groups,
		BitsPerGeneration: groups * BlockBits,
		BitsPerKey:        float64(groups*BlockBits) / float64(cfg.Capacity),
	}
	s.GenerationFPR = blockedFPR(float64(cfg.Capacity)/float64(groups), k)
	s.PredictedFPR = -math.Expm1(float64(n) * math.Log1p(-s.GenerationFPR))

	maxBytes := cfg.MaxBytes
	if maxBytes == 0 {
		maxBytes = DefaultMaxBytes
	}
	// groups*slots*64 + groups*8 must not overflow and must fit under the cap.
	perGroup := uint64(slots)*BlockBits/8 + 8
	if groups > maxBytes/perGroup {
		return s, fmt.Errorf("%w: %d generations of %d keys at false-positive rate %g need %d bytes, cap is %d bytes (raise the cap, or lower capacity, generations or precision)",
			ErrMemory, n, cfg.Capacity, p, saturatingMul(groups, perGroup), maxBytes)
	}
	s.TotalBytes = groups * perGroup
	return s, nil
}

func saturatingMul(a, b uint64) uint64 {
	if a != 0 && b > math.MaxUint64/a {
		return math.MaxUint64
	}
	return a * b
}

// blockParams memoises bestBlockParams, which takes tens of milliseconds.
var blockParams sync.Map // float64 target → [2]float64{k, lambda}

// bestBlockParams returns the k and the largest mean number of keys per block (lambda) for which a
// 512-bit blocked Bloom filter stays at or under the false-positive rate target.
func bestBlockParams(target float64) (k int, lambda float64) {
	if v, ok := blockParams.Load(target); ok {
		kl := v.([2]float64)
		return int(kl[0]), kl[1]
	}
	k, lambda = searchBlockParams(target)
	blockParams.Store(target, [2]float64{float64(k), lambda})
	return k, lambda
}

func searchBlockParams(target float64) (k int, lambda float64) {
	bestK, bestL := 1, 0.0
	for k := 1; k <= maxK; k++ {
		lo, hi := 0.0, float64(BlockBits)
		if blockedFPR(1e-9, k) > target {
			continue
		}
		for i := 0; i < 60; i++ {
			mid := (lo + hi) / 2
			if blockedFPR(mid, k) <= target {
				lo = mid
			} else {
				hi = mid
			}
		}
		if lo > bestL {
			bestK, bestL = k, lo
		}
	}
	if bestL == 0 { // unreachable for target >= 1e-15, kept as a guard
		bestL = 1e-3
	}
	return bestK, bestL
}

// blockedFPR is the false-positive rate of a blocked Bloom filter with BlockBits-bit blocks, k bits
// per key at independent positions, and a Poisson(lambda) number of keys per block.
func blockedFPR(lambda float64, k int) float64 {
	if lambda <= 0 {
		return 0
	}
	q := math.Log1p(-1.0 / BlockBits) // log of the chance one set bit misses a given bit
	limit := int(lambda + 12*math.Sqrt(lambda) + 30)
	logP := -lambda // log Poisson(0)
	sum := 0.0
	for j := 0; j <= limit; j++ {
		if j > 0 {
			logP += math.Log(lambda) - math.Log(float64(j))
		}
		fill := -math.Expm1(float64(j*k) * q)
		if fill > 0 {
			sum += math.Exp(logP + float64(k)*math.Log(fill))
		}
	}
	return sum
}
