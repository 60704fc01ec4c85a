package window

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// A snapshot is input from outside the process: whoever can write the checkpoint store can write
// one, and its checksums (CRC32C) can be recomputed by anyone. So Restore checks what a snapshot
// claims against what a filter can have written before it trusts it:
//
//   - Memory: the filter the snapshot describes (stage 0 and every grown stage, sized by the
//     Config, not by the snapshot's own claims) must fit RestoreLimit, checked before anything
//     is allocated.
//   - Time: its current generation must start no later than one interval plus MaxClockSkew (plus
//     Config.Ahead) after the wall clock (Config.WallClock), and its origin no later than
//     MaxClockSkew after it. A snapshot from the future
//     would keep its generations (full ones included) live until the clock caught up with it.
//   - Fill: each live generation's share of set bits must be plausible for the keys recorded for
//     it (see checkFill). A crafted all-ones generation would make every new identity a
//     duplicate.
//
// What fails these checks is ErrImplausible, distinct from ErrIncompatible (a snapshot of other
// parameters), so that the caller can fall back to an older snapshot or a rebuild and count the
// reason (ImplausibleReason).

// ErrImplausible is returned (wrapped, with an *ImplausibleError) by Restore for a snapshot that
// no filter of its Config can have written: corrupt or crafted.
var ErrImplausible = errors.New("window: implausible snapshot")

// MaxClockSkew is how far the clocks of the workers that write and restore snapshots may differ:
// a snapshot's current generation may start up to one interval plus MaxClockSkew after the
// restoring worker's clock.
const MaxClockSkew = 5 * time.Minute

// Reasons of ImplausibleError, a closed set (ImplausibleReasons).
const (
	ImplausibleMemory = "memory" // the filter would exceed RestoreLimit
	ImplausibleFuture = "future" // its generations lie in the future
	ImplausibleFill   = "fill"   // a generation's set bits do not fit its recorded keys
)

// ImplausibleReasons returns every ImplausibleError.Reason.
func ImplausibleReasons() []string {
	return []string{ImplausibleMemory, ImplausibleFuture, ImplausibleFill}
}

// ImplausibleError says why Restore refused a snapshot. errors.Is(err, ErrImplausible) holds.
type ImplausibleError struct {
	Reason string // one of ImplausibleReasons
	Detail string
}

func (e *ImplausibleError) Error() string {
	return fmt.Sprintf("%v (%s): %s", ErrImplausible, e.Reason, e.Detail)
}

// Is reports whether target is ErrImplausible.
func (e *ImplausibleError) Is(target error) bool { return target == ErrImplausible }

func implausible(reason, format string, args ...any) error {
	return &ImplausibleError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// RestoreLimit returns the most memory a filter of cfg restored from a snapshot may take: the
// filter's cap, Config.MaxBytes (DefaultMaxBytes when zero), or the limit of Config.Budget when
// that is lower. A filter can grow to its cap and no further, so no snapshot a filter of cfg
// wrote needs more.
func RestoreLimit(cfg Config) uint64 { return capBytes(cfg) }

// checkTrust checks what m claims before anything is allocated for it: its memory against
// RestoreLimit and its generations against the wall clock. s is cfg's sizing; m is compatible.
func checkTrust(cfg Config, s Sizing, m Meta) error {
	cfg = cfg.withAuto()
	now := time.Now()
	if cfg.WallClock != nil {
		now = cfg.WallClock()
	}
	need, limit := snapshotBytes(cfg, s, m), RestoreLimit(cfg)
	if need > limit {
		return implausible(ImplausibleMemory, "the snapshot needs %d bytes (%d grown stages), more than the filter's cap of %d",
			need, len(m.Stages), limit)
	}
	latest := now.Add(cfg.Interval + MaxClockSkew + max(cfg.Ahead, 0))
	if start := m.GenerationStart(m.Epoch); start.After(latest) || m.Origin.After(now.Add(MaxClockSkew)) {
		return implausible(ImplausibleFuture, "generation %d starts at %s (origin %s), after the wall clock (%s) plus one interval, %s ahead and %s of skew",
			m.Epoch, start.UTC().Format(time.RFC3339), m.Origin.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), max(cfg.Ahead, 0), MaxClockSkew)
	}
	return nil
}

// snapshotBytes returns the memory a filter restored from m takes: stage 0 and each grown stage
// m lists, at the size cfg's layout gives its index (saturating).
func snapshotBytes(cfg Config, s Sizing, m Meta) uint64 {
	total := s.TotalBytes
	shardBits := shardLayout(s.GrowAt)
	for _, sm := range m.Stages {
		if sm.Index < 1 || sm.Index > 64 {
			return math.MaxUint64
		}
		b := growthStage(cfg.Capacity, s.ShareFPR, sm.Index, shardBits).bytes
		if cfg.Auto { // any number of groups: what the snapshot lists
			b = stageBytes(sm.Groups, max(sm.Sectors, 1), shardBits)
		}
		if total+b < total {
			return math.MaxUint64
		}
		total += b
	}
	return total
}

// fillSlack is how many keys more than a generation's recorded fill its set bits may suggest, as
// a share of its capacity: the estimate's error on a sample of groups, and keys added while the
// snapshot was copied (in the bits, not yet in the counts).
const fillSlack = 0.05

// checkFill checks each live generation of f (restored, not shared yet), stage 0 against GrowAt
// and each grown stage against its own capacity (see plausible), and that the counts of a
// generation add up without overflow.
func (f *Filter) checkFill() error {
	stride := max(f.groups/f.statsSample, 1)
	for s, e := range f.slotEpoch {
		if e < 0 {
			continue
		}
		rec, over := countSum(0, f.fill[s<<f.shardBits:(s+1)<<f.shardBits])
		gs := f.generationStats(s, stride)
		if err := plausible(e, 0, rec, fillOf(&f.blocks, gs.Fill, gs.EstimatedKeys), f.sizing.GrowAt); err != nil {
			return err
		}
		total := rec
		for _, st := range f.restoredStages(uint64(e)) {
			n, o := countSum(0, st.count)
			if err := plausible(e, st.index, n, st.fill(f.statsSample), st.capacity); err != nil {
				return err
			}
			var c uint64
			total, c = bits.Add64(total, n, 0)
			over = over || o || c != 0
		}
		if over {
			return implausible(ImplausibleFill, "generation %d records more keys than a count holds", e)
		}
	}
	return nil
}

// stageFill is what a stage's set bits say of the keys it took.
type stageFill struct {
	est    float64 // keys that, added blindly, set as many bits (EstimatedKeys)
	needed float64 // new keys that set as many bits (newKeysFor)
	bits   float64 // the stage's data bits
}

// fillOf returns the stageFill of a stage of layout b whose share of set data bits is fill, and
// whose bits imply est keys.
func fillOf(b *blocks, fill, est float64) stageFill {
	k := 0
	for _, n := range b.ks[:b.sectors] {
		k += n
	}
	m := float64(b.groups) * float64(b.sectors) * UsableSectorBits
	return stageFill{est: est, needed: newKeysFor(fill, k, m), bits: m}
}

// fill returns the stageFill of a grown stage, reading at most sample groups (as stats does).
func (sg *stage) fill(sample uint64) stageFill {
	set, groups, _ := sg.slotFill(0, 0, max(sg.groups/sample, 1))
	est := keysPerGroup(float64(set)/float64(groups), sg.ks[:sg.sectors]) * float64(sg.groups)
	return fillOf(&sg.blocks, float64(set)/float64(groups*uint64(sg.sectors)*UsableSectorBits), est)
}

// newKeysFor returns how many new keys leave a Bloom filter of m bits, into which a key sets k,
// with the share fill of its bits set: (m/k)·Σ_{j=1..k} fill^j/j. A filter adds only a key it does
// not report seen, so each key it takes sets one new bit at least. Of x keys offered blindly, which
// leave a share F = 1-e^(-kx/m) of the bits set, a share F^k is reported seen when offered, so the
// new keys among them are ∫(1-F^k)dx = (m/k)·Σ F^j/j. Below capacity that is close to the keys the
// bits imply (few keys are reported seen there); past it, it is what a stage's counts record while
// the keys its bits imply run ahead (they count the keys reported seen too). It is finite for an
// all-ones filter: (m/k)·H_k, 5 to 12 times the capacity of a grown stage at 1e-2 to 1e-15.
func newKeysFor(fill float64, k int, m float64) float64 {
	var sum, pow float64 = 0, 1
	for j := 1; j <= k; j++ {
		pow *= fill
		sum += pow / float64(j)
	}
	return m / float64(k) * sum
}

// plausible checks one stage: rec keys recorded, taking capacity keys, whose set bits say fill.
//
//   - Every key a stage took set one of its bits at least (a key whose bits are all set is seen,
//     and not added), so it cannot have taken more keys than it has bits.
//   - The keys its bits imply may be at most its capacity or twice its recorded keys, whichever
//     is more, plus fillSlack of its capacity. A stage holds about its capacity keys unless the
//     memory cap made it take more, so bits that imply up to that many are plausible whatever
//     the counts say: a single-file snapshot copies the counts before the words, and a busy
//     writer can add many keys in between. Past its capacity (at the memory cap under
//     OverloadDrop the last stage, or stage 0, goes on taking the generation's keys, counted)
//     more and more of the keys offered are reported seen and not added, so the bits are measured
//     by the new keys that set them (newKeysFor), which is what the counts record. So a stage
//     that took enough keys may even be all ones, which is what a filter far past its cap under
//     OverloadDrop comes to (every key is then reported seen); an all-ones stage that records
//     fewer than half of the (m/k)·H_k new keys it takes to get there is refused.
func plausible(epoch int64, stage int, rec uint64, fill stageFill, capacity uint64) error {
	slack := fillSlack*float64(capacity) + 64
	switch {
	case float64(rec) > fill.bits*(1+fillSlack)+1024:
		return implausible(ImplausibleFill, "generation %d, stage %d records %d keys, more than its %.0f bits can take", epoch, stage, rec, fill.bits)
	case min(fill.est, fill.needed) > max(2*float64(rec), float64(capacity))+slack:
		return implausible(ImplausibleFill, "generation %d, stage %d: its set bits imply %.0f keys (%.0f new ones), %d recorded",
			epoch, stage, fill.est, fill.needed, rec)
	}
	return nil
}

// countSum returns sum plus the counts of cs, and whether the sum overflowed.
func countSum(sum uint64, cs []fillCounter) (uint64, bool) {
	over := false
	for i := range cs {
		var c uint64
		sum, c = bits.Add64(sum, cs[i].n, 0)
		over = over || c != 0
	}
	return sum, over
}
