package window

import (
	"fmt"
	"math"
	"sync/atomic"
)

// Auto sizing. With Config.Auto a filter's stage 0 is small (Capacity keys, AutoCapacity by
// default) and takes autoStage0Share of each generation's share p_g of the target. Every key a
// generation takes beyond it goes to the generation's own stages, and the first of them, stage 1,
// is sized when stage 0 fills, from the load observed (autoCapacity):
//
//   - the keys the previous generation took (its history), and
//   - the rate at which the generation took its keys so far, projected over its interval;
//
// it takes AutoHeadroom times the smaller of the two, less what the generation holds already.
// The projection is the generation's insert rate so far (held keys over the time since it began)
// times its whole interval: what it holds plus the rate times its remaining time. A filter with
// no history (new, or after a gap) has only the projection, and a burst at the start of an
// interval projects an interval's worth of keys at the burst's rate: so a stage that only the
// projection sizes is at most autoMaxStep·4^(i-1) times the keys the generation holds when stage
// i is made (8×, 32×, 128× …). A cold start with a burst then ends with few stages: 1024 keys in
// stage 0, 8192 in stage 1, up to 295k in stage 2 (304k in all), up to 39M in stage 3, where a
// fixed 8× bound adds a stage per factor of 9; the bound grows with the evidence that the burst
// lasts, and a burst that stops early leaves at most that factor of its keys unused. Stage
// 1 holds its keys at (1-GrowthShare-autoStage0Share)·p_g. A generation that takes more than stage
// 1 grows by stages sized by the projection alone at GrowthShare·p_g·2^-(i-1) for stage i ≥ 2, so
// its rate stays under autoStage0Share·p_g + (1-GrowthShare-autoStage0Share)·p_g + GrowthShare·p_g
// < p_g at any load, as with a fixed Capacity. Every stage is bounded by the memory the filter may
// still use (its cap and its share of Config.Budget, roomKeys). When the load falls, the next
// generation's stage 1 is sized for the lower load; the stages of an expired generation are
// unmapped (stageWords) as it rotates out, so the memory follows the load one window later.

// AutoCapacity is stage 0's capacity of an auto-sized filter whose Config.Capacity is zero: 1024
// keys per generation, a few KiB per generation at the usual targets.
const AutoCapacity = 1024

// AutoHeadroom is how much more than the load observed an auto-sized generation's stage 1 holds.
const AutoHeadroom = 1.25

// autoStage0Share is the share of p_g that an auto-sized filter's stage 0 takes at Capacity keys.
const autoStage0Share = 1.0 / 16

// autoMaxStep bounds a stage that only the projection sizes: stage 1 holds at most autoMaxStep
// times the keys the generation holds when the stage is made, and each later stage
// autoStepGrowth times more than that (autoMaxStepFor).
const autoMaxStep = 8

// autoStepGrowth is the factor by which the bound of autoMaxStep grows from one stage to the next.
const autoStepGrowth = 4

// autoMaxStepFor returns autoMaxStep·autoStepGrowth^(i-1), the most keys a stage i ≥ 1 that only
// the projection sizes holds per key the generation holds (capped at stage 24's, far above any
// capacity).
func autoMaxStepFor(i int) float64 {
	return autoMaxStep * math.Pow(autoStepGrowth, float64(min(max(i, 1), 24)-1))
}

// withAuto returns c with Capacity set to AutoCapacity when Auto is set and Capacity is zero.
func (c Config) withAuto() Config {
	if c.Auto && c.Capacity == 0 {
		c.Capacity = AutoCapacity
	}
	return c
}

// stage0Share returns the share of p_g that stage 0 takes at Capacity keys.
func stage0Share(cfg Config) float64 {
	if cfg.Auto {
		return autoStage0Share
	}
	return 1 - GrowthShare
}

// autoTarget returns the false-positive rate of stage i ≥ 1 of an auto-sized generation whose
// share of the target is share.
func autoTarget(share float64, i int) float64 {
	if i == 1 {
		return (1 - GrowthShare - autoStage0Share) * share
	}
	return GrowthShare * share * math.Ldexp(1, 1-i)
}

// nextStageLayout returns the layout of stage i ≥ 1 of generation gg, made now: for a fixed
// Capacity its layout by index (stageLayout), else sized by autoStageCapacity from the load
// observed and the memory the filter may still use under its cap.
func (f *Filter) nextStageLayout(gg *grownGen, i int) stageLayout {
	if !f.cfg.Auto {
		return f.stageLayout(i)
	}
	target := autoTarget(f.sizing.ShareFPR, i)
	held := f.generationKeys(gg.epoch)
	hist := 0.0
	if i == 1 && gg.epoch > 0 {
		hist = float64(f.generationKeys(gg.epoch - 1))
	}
	room := f.roomKeys(target)
	c := autoStageCapacity(i, held, f.cfg.Capacity, hist, f.projectedLoad(gg.epoch, held), room)
	return stageFor(c, target, i, f.shardBits)
}

// autoStageCapacity is the sizing rule of auto sizing: the capacity of stage i ≥ 1 made for a
// generation that holds held keys, given the keys the previous generation took (hist, 0 when
// unknown or not for stage 1), the keys the generation's rate projects over its interval, and
// room, the most keys the memory the filter may use still holds at the stage's rate. The stage
// takes AutoHeadroom times the smaller observation less what the generation holds, at least held
// and floor (stage 0's capacity); without history at most autoMaxStepFor(i) times held; and never
// more than room (a stage of at least one key: the memory cap then refuses it if it must).
func autoStageCapacity(i int, held, floor uint64, hist, projected, room float64) uint64 {
	est, hi := projected, autoMaxStepFor(i)*float64(max(held, 1))
	if hist > 0 {
		est, hi = min(est, hist), max(hi, AutoHeadroom*hist)
	}
	lo := float64(max(held, floor))
	want := min(max(AutoHeadroom*est-float64(held), lo), max(hi, lo), room)
	return uint64(max(min(want, math.MaxUint64/4), 1))
}

// roomKeys returns the keys a stage at the false-positive rate target holds in the memory the
// filter may still use: under its cap, and under what its memory budget has left when it draws
// on one.
func (f *Filter) roomKeys(target float64) float64 {
	used := f.sizing.TotalBytes + uint64(max(f.stageBytes.Load(), 0))
	if used >= f.maxBytes {
		return 0
	}
	room := f.maxBytes - used
	if s := f.budget; s != nil && !s.released.Load() {
		room = min(room, s.b.Available())
	}
	bp := bestLayout(target)
	return float64(room) / float64(bp.sectors*SectorBits/8) * bp.lambda
}

// projectedLoad returns the keys generation epoch takes over its interval at the rate at which it
// took held keys so far (+Inf at its very start).
func (f *Filter) projectedLoad(epoch, held uint64) float64 {
	elapsed := f.cfg.Clock().Sub(f.startOf(epoch))
	if elapsed <= 0 {
		return math.Inf(1)
	}
	return float64(held) * float64(f.cfg.Interval) / float64(min(elapsed, f.cfg.Interval))
}

// generationKeys returns the keys live generation epoch was offered, stage 0 and grown stages
// together: its observed load. It is 0 for a generation that is not live.
func (f *Filter) generationKeys(epoch uint64) uint64 {
	v := f.view.Load()
	for i, e := range v.epochs {
		if e == epoch {
			return f.slotKeys(v.active[i], epoch)
		}
	}
	return 0
}

// slotKeys returns the keys offered to generation epoch held by slot s.
func (f *Filter) slotKeys(s int, epoch uint64) uint64 {
	n := f.stage0Keys(s)
	if gg := f.grownGenIfAny(epoch); gg != nil {
		for _, st := range *gg.stages.Load() {
			n += st.liveKeys()
		}
	}
	return n
}

// liveKeys returns the keys the stage was offered, read atomically: safe while writers continue.
func (sg *stage) liveKeys() uint64 {
	var n uint64
	for i := range sg.count {
		n += atomic.LoadUint64(&sg.count[i].n)
	}
	return n
}

// restoredLayout returns the layout of the grown stage sm describes, or an error wrapping
// ErrIncompatible when it is not one the filter's Config makes. An auto-sized stage has the
// layout of its index's target and any number of groups; its capacity is what those groups hold
// at the target, at most one group's worth of keys more than it was made for.
func (f *Filter) restoredLayout(sm StageMeta) (stageLayout, error) {
	lay := f.stageLayout(sm.Index)
	if f.cfg.Auto {
		bp := bestLayout(autoTarget(f.sizing.ShareFPR, sm.Index))
		capacity := uint64(max(math.Floor(float64(sm.Groups)*bp.lambda), 1))
		lay = stageFor(capacity, autoTarget(f.sizing.ShareFPR, sm.Index), sm.Index, f.shardBits)
		lay.groups = max(sm.Groups, 1)
		lay.bytes = stageBytes(lay.groups, bp.sectors, f.shardBits)
	}
	if sm.Groups != lay.groups || sm.K != lay.layout.k || sm.FirstBits != lay.layout.first || sm.Sectors != lay.layout.sectors ||
		sm.Words != lay.groups*uint64(lay.layout.sectors)*sectorWords {
		return lay, fmt.Errorf("%w: stage %d has %d groups, k %d (%d in the first word), %d sectors and %d words; layout needs %d, %d (%d), %d",
			ErrIncompatible, sm.Index, sm.Groups, sm.K, sm.FirstBits, sm.Sectors, sm.Words, lay.groups, lay.layout.k, lay.layout.first, lay.layout.sectors)
	}
	return lay, nil
}

// ObservedLoad returns the keys the current generation was offered so far and those the
// generation before it took (0 when it is not live): the load auto sizing follows. It takes no
// lock and is safe for concurrent use.
func (f *Filter) ObservedLoad() (current, previous uint64) {
	v := f.view.Load()
	current = f.slotKeys(v.cur, v.epoch)
	if v.epoch > 0 {
		previous = f.generationKeys(v.epoch - 1)
	}
	return current, previous
}
