package window

import (
	"errors"
	"fmt"
	"math"
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
//     it (see checkFill), and no more keys may be recorded than the generation takes. A crafted
//     all-ones generation would make every new identity a duplicate.
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

// checkFill checks, for each live generation of f (restored, not shared yet), that its stage 0
// took no more keys than GrowAt allows (plus the last few percent insert lets through), and that
// the keys its set bits imply are at most its capacity or twice its recorded keys, whichever is
// more, plus fillSlack of its capacity;
// likewise for each grown stage against its own capacity and counts.
func (f *Filter) checkFill() error {
	stride := max(f.groups/f.statsSample, 1)
	for s, e := range f.slotEpoch {
		if e < 0 {
			continue
		}
		rec, est := f.stage0Keys(s), f.generationStats(s, stride).EstimatedKeys
		if err := plausible(e, 0, rec, est, f.sizing.GrowAt); err != nil {
			return err
		}
		for _, st := range f.restoredStages(uint64(e)) {
			est, _ := st.stats(f.statsSample)
			if err := plausible(e, st.index, st.keys(), est, st.capacity); err != nil {
				return err
			}
		}
	}
	return nil
}

// plausible checks one stage: rec keys recorded, est implied by its bits, taking capacity keys.
func plausible(epoch int64, stage int, rec uint64, est float64, capacity uint64) error {
	slack := fillSlack * float64(capacity)
	if float64(rec) > float64(capacity)*(1+fillSlack)+1024 {
		return implausible(ImplausibleFill, "generation %d, stage %d records %d keys, more than it takes (%d)", epoch, stage, rec, capacity)
	}
	// A stage holds at most its capacity keys, so bits that imply up to that many are plausible
	// whatever the counts say: a snapshot copies the counts before the words, and a busy writer
	// can add many keys in between.
	if est > max(2*float64(rec), float64(capacity))+slack+64 {
		return implausible(ImplausibleFill, "generation %d, stage %d: its set bits imply %.0f keys, %d recorded", epoch, stage, est, rec)
	}
	return nil
}

// keys returns the keys the stage was offered, over its shards.
func (sg *stage) keys() uint64 {
	var n uint64
	for i := range sg.count {
		n += sg.count[i].n
	}
	return n
}
