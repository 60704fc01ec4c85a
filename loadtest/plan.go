package loadtest

import (
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// plannedDup is one duplicate of an original: its kind, its delay after the original was sent,
// and where it goes.
type plannedDup struct {
	kind   Kind
	delay  time.Duration
	entity uint32
	part   int32
}

// planned is one original event and its duplicates.
type planned struct {
	ord    uint32 // ordinal of the event: 0, 1, 2, ...
	entity uint32 // entity (Kafka key index); the ordinal under FieldKey
	part   int32
	late   bool // stamped LateAge before its creation (Config.Late); never has duplicates
	// oversize: its value has Config.OversizeBytes (Config.Oversize); never has duplicates
	oversize bool
	dups     []plannedDup
}

// planner draws the plan one original at a time from a PRNG seeded with the configuration's
// seed. It is not safe for concurrent use.
type planner struct {
	cfg        Config
	partitions int
	rng        *rand.Rand
	ids        idMaker
	keyIsID    bool    // FieldKey: every event is its own entity
	entityPart []int32 // partition of every entity (not keyIsID)
	parts      []int   // 0..partitions-1, for the balancer
	remaining  int     // records not planned yet
	next       uint32  // next ordinal
	late       int     // late records planned so far
	oversize   int     // oversized records planned so far
	perOrig    float64 // mean number of duplicates per original that is not late
	scratch    []byte
}

// newPlanner returns a planner for cfg (with defaults applied) and an input topic of partitions
// partitions.
func newPlanner(cfg Config, partitions int) *planner {
	p := &planner{
		cfg:        cfg,
		partitions: partitions,
		rng:        rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x6c6f6164746573)),
		ids:        newIDMaker(cfg.RunID),
		keyIsID:    cfg.Field.Kind == FieldKey,
		remaining:  cfg.Count,
		perOrig:    cfg.DupRatio / (1 - cfg.DupRatio - cfg.Late),
	}
	p.parts = make([]int, partitions)
	for i := range p.parts {
		p.parts[i] = i
	}
	if !p.keyIsID {
		p.entityPart = make([]int32, cfg.Entities)
		for e := range p.entityPart {
			p.entityPart[e] = p.partitionOf(entityKey(nil, uint32(e), cfg.KeySize))
		}
	}
	return p
}

// partitionOf places a key like the Java client's default partitioner (murmur2).
func (p *planner) partitionOf(key []byte) int32 {
	return int32(kafkaio.KeyPartition(key, p.parts...))
}

// nextOriginal returns the next original of the plan with its duplicates, or false when the plan
// is complete (Count records planned). The k-th record planned is a late one (nextLate) when
// k·Config.Late reaches the next whole number, so that a share Late of the records is late,
// spread evenly, without a draw from the PRNG.
func (p *planner) nextOriginal() (planned, bool) {
	if p.remaining <= 0 {
		return planned{}, false
	}
	k := p.cfg.Count - p.remaining + 1
	if p.oversize < p.cfg.Oversize && k*(p.cfg.Oversize+1) >= p.cfg.Count*(p.oversize+1) {
		return p.nextOversize(), true
	}
	if p.cfg.Late > 0 && float64(p.late+1) <= p.cfg.Late*float64(k) {
		return p.nextLate(), true
	}
	o := planned{ord: p.next}
	p.next++
	p.remaining--
	if p.keyIsID {
		o.entity = o.ord
		p.scratch = p.ids.key(p.scratch[:0], o.ord, p.cfg.KeySize)
		o.part = p.partitionOf(p.scratch)
	} else {
		o.entity = uint32(p.rng.IntN(p.cfg.Entities))
		o.part = p.entityPart[o.entity]
	}
	if p.cfg.DupRatio == 0 {
		return o, true
	}
	n := int(p.perOrig)
	if p.rng.Float64() < p.perOrig-float64(n) {
		n++
	}
	n = min(n, p.remaining)
	var beyond, cross bool
	for range n {
		d, ok := p.drawDup(o, &beyond, &cross)
		if ok {
			o.dups = append(o.dups, d)
			p.remaining--
		}
	}
	return o, true
}

// nextLate returns a late record: a unique event (see nextUnique) whose Kafka timestamp the
// generator sets LateAge before its creation.
func (p *planner) nextLate() planned {
	o := p.nextUnique()
	o.late = true
	p.late++
	return o
}

// nextOversize returns the i-th oversized record: a unique event (see nextUnique) on input
// partition i % partitions, whose value the generator pads to Config.OversizeBytes.
func (p *planner) nextOversize() planned {
	o := p.nextUnique()
	o.oversize, o.part = true, int32(p.oversize%p.partitions)
	p.oversize++
	return o
}

// nextUnique returns a unique event without duplicates, on the entity of its ordinal (no PRNG
// draw).
func (p *planner) nextUnique() planned {
	o := planned{ord: p.next}
	p.next++
	p.remaining--
	if p.keyIsID {
		o.entity = o.ord
		p.scratch = p.ids.key(p.scratch[:0], o.ord, p.cfg.KeySize)
		o.part = p.partitionOf(p.scratch)
	} else {
		o.entity = o.ord % uint32(p.cfg.Entities)
		o.part = p.entityPart[o.entity]
	}
	return o
}

// drawDup draws one duplicate of o. An event gets at most one beyond and one cross duplicate; a
// second draw of either becomes an immediate or within duplicate (by their weights), or nothing
// when those weigh 0 or a cross duplicate has nowhere to go.
func (p *planner) drawDup(o planned, beyond, cross *bool) (plannedDup, bool) {
	m := p.cfg.Mix
	if p.partitions < 2 {
		m.Cross = 0
	}
	d := plannedDup{entity: o.entity, part: o.part}
	x := p.rng.Float64() * m.total()
	switch {
	case x < m.Immediate:
		d.kind = KindImmediate
	case x < m.Immediate+m.Within:
		d.kind = KindWithin
	case x < m.Immediate+m.Within+m.Beyond:
		d.kind = KindBeyond
	default:
		d.kind = KindCross
	}
	if (d.kind == KindBeyond && *beyond) || (d.kind == KindCross && *cross) {
		sum := m.Immediate + m.Within
		if sum == 0 {
			return d, false
		}
		d.kind = KindWithin
		if p.rng.Float64()*sum < m.Immediate {
			d.kind = KindImmediate
		}
	}
	switch d.kind {
	case KindWithin:
		d.delay = p.uniform(0, p.cfg.WithinMax)
	case KindBeyond:
		*beyond = true
		d.delay = p.uniform(p.cfg.BeyondMin, p.cfg.BeyondMax)
	case KindCross:
		*cross = true
		d.delay = p.uniform(0, p.cfg.WithinMax)
		if p.keyIsID {
			d.part = int32((int(o.part) + 1 + p.rng.IntN(p.partitions-1)) % p.partitions)
		} else {
			found := false
			for range 64 {
				e := uint32(p.rng.IntN(p.cfg.Entities))
				if p.entityPart[e] != o.part {
					d.entity, d.part, found = e, p.entityPart[e], true
					break
				}
			}
			if !found {
				*cross = false
				return d, false
			}
		}
	}
	return d, true
}

func (p *planner) uniform(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(p.rng.Int64N(int64(hi-lo)+1))
}

// idMaker turns event ordinals into event ids: 16 hex digits of a bijective mix of the ordinal
// and a salt derived from the run id, so that distinct ordinals give distinct ids and runs with
// different ids do not collide.
type idMaker struct{ salt uint64 }

func newIDMaker(runID string) idMaker {
	h := fnv.New64a()
	h.Write([]byte(runID))
	return idMaker{salt: h.Sum64()}
}

// id appends the 16-digit event id of ord to dst.
func (m idMaker) id(dst []byte, ord uint32) []byte {
	x := m.salt + uint64(ord)*0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	const hex = "0123456789abcdef"
	for i := 60; i >= 0; i -= 4 {
		dst = append(dst, hex[x>>uint(i)&0xf])
	}
	return dst
}

// key appends the event id of ord padded with '.' to size bytes (used as the Kafka key under
// FieldKey).
func (m idMaker) key(dst []byte, ord uint32, size int) []byte {
	start := len(dst)
	dst = m.id(dst, ord)
	for len(dst)-start < size {
		dst = append(dst, '.')
	}
	return dst
}

// entityKey appends the Kafka key of entity e, "e" and its number zero-padded to size bytes.
func entityKey(dst []byte, e uint32, size int) []byte {
	digits := strconv.AppendUint(nil, uint64(e), 10)
	dst = append(dst, 'e')
	for i := len(digits) + 1; i < size; i++ {
		dst = append(dst, '0')
	}
	return append(dst, digits...)
}
