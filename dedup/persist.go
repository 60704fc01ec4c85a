package dedup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/checkpoint/snapshot"
	"github.com/kdedup/kdedup/window"
)

// CheckpointPersister is the Persister that keeps snapshots in a checkpoint.Store, in the
// checkpoint/snapshot file format. It is safe for concurrent use.
//
// Policy on restore: the newest usable snapshot wins; a corrupt, truncated or foreign file falls
// back to the previous one. A snapshot taken with a configuration that changes the filter's layout
// or hashing (window count, interval, capacity, false-positive rate or hash seed), or written in
// the filter layout of an older kdedup (snapshot format v1 to v4), cannot be used: the unit starts
// cold (and is rebuilt from the output topic where that is possible) and a warning says why.
type CheckpointPersister struct {
	store *checkpoint.Store
	log   *slog.Logger
}

// NewCheckpointPersister returns a Persister over store. A nil logger means slog.Default().
func NewCheckpointPersister(store *checkpoint.Store, log *slog.Logger) *CheckpointPersister {
	if log == nil {
		log = slog.Default()
	}
	return &CheckpointPersister{store: store, log: log}
}

// Restore loads the newest usable snapshot of unit into cfg; Restored.Snapshot names it. With none
// usable it returns a nil filter and checkpoint.OutcomeCold, after logging why each snapshot was
// rejected. It returns an error only when the store itself fails (for example it cannot list or
// read the directory).
func (p *CheckpointPersister) Restore(ctx context.Context, unit string, cfg window.Config) (*window.Filter, Restored, error) {
	f, res, err := checkpoint.Load(ctx, p.store, unit, func(h snapshot.Header, d *snapshot.Decoder) (*window.Filter, error) {
		if h.Version < snapshot.VersionV5 {
			return nil, fmt.Errorf("%w: format version %d: the snapshot's filter layout is from an older kdedup and cannot be restored; the unit starts from the output topic instead",
				checkpoint.ErrIncompatible, h.Version)
		}
		f, err := window.Restore(cfg, metaFromHeader(h), d)
		if errors.Is(err, window.ErrIncompatible) {
			return nil, fmt.Errorf("%w: %w", checkpoint.ErrIncompatible, err)
		}
		return f, err
	})
	for _, fl := range res.Failures {
		p.log.Warn("snapshot rejected", "unit", unit, "file", fl.Snapshot.Name, "error", fl.Err.Error())
	}
	if err != nil && !errors.Is(err, checkpoint.ErrNoUsableSnapshot) {
		return nil, Restored{}, err
	}
	if f == nil {
		if len(res.Failures) > 0 {
			p.log.Warn("no usable snapshot: starting cold; duplicates of records produced before this start may pass",
				"unit", unit, "rejected", len(res.Failures))
		}
		return nil, Restored{Outcome: checkpoint.OutcomeCold}, nil
	}
	out := res.Header.OutputOffsets
	if out == nil {
		p.log.Warn("snapshot has no output offsets (format v1): the filter cannot be re-warmed from the output topic",
			"unit", unit, "file", res.Snapshot.Name)
	}
	return f, Restored{Outcome: res.Outcome, OutputOffsets: out, Snapshot: refOf(res.Snapshot)}, nil
}

// Newest returns the newest snapshot of unit the store lists, without reading it, or the zero
// SnapshotRef when there is none. It returns the store's error when listing fails.
func (p *CheckpointPersister) Newest(ctx context.Context, unit string) (SnapshotRef, error) {
	infos, err := p.store.List(ctx, unit)
	if err != nil || len(infos) == 0 {
		return SnapshotRef{}, err
	}
	return refOf(infos[0]), nil
}

func refOf(info checkpoint.Info) SnapshotRef {
	return SnapshotRef{Name: info.Name, Seq: info.Seq, Size: info.Size}
}

// Save writes f's state for unit through the store: the header from f's metadata and info, then
// the data, then seal; only if all succeed does the snapshot replace older ones. A store error
// wrapping checkpoint.ErrNotDurable is returned as a failure although the snapshot is visible: it
// is complete and sealed, but may not survive a crash. A pruning failure is only logged.
func (p *CheckpointPersister) Save(ctx context.Context, unit string, f *window.Filter, info SnapshotInfo, seal func(context.Context) error) (SnapshotRef, error) {
	snap, err := p.store.Save(ctx, unit, func(w io.Writer) error {
		return f.Snapshot(func(m window.Meta, writeData func(io.Writer) (int64, error)) error {
			h := headerFromMeta(m, info)
			return snapshot.Encode(w, h, func(dw io.Writer) error {
				if _, err := writeData(dw); err != nil {
					return err
				}
				return seal(ctx)
			})
		})
	})
	if errors.Is(err, checkpoint.ErrPrune) {
		p.log.Warn("old snapshots could not be pruned", "unit", unit, "error", err.Error())
		err = nil
	}
	if err != nil {
		return SnapshotRef{}, err
	}
	return refOf(snap), nil
}

func headerFromMeta(m window.Meta, info SnapshotInfo) snapshot.Header {
	h := snapshot.Header{
		Generations:       m.Generations,
		Interval:          m.Interval,
		Capacity:          m.Capacity,
		FalsePositiveRate: m.FalsePositiveRate,
		Seed:              m.Seed,
		K:                 m.K,
		FirstBits:         m.FirstBits,
		BlockBits:         m.SectorBits,
		Sectors:           m.Sectors,
		Groups:            m.Groups,
		Slots:             m.Slots,
		SlotUses:          m.SlotUses,
		Words:             m.Words,
		ShardBits:         m.ShardBits,
		Fill:              m.Fill,
		Origin:            m.Origin,
		Epoch:             m.Epoch,
		Rotations:         m.Rotations,
		Scope:             string(info.Scope),
		Topic:             info.Topic,
		Partition:         info.Partition,
		InputOffsets:      info.InputOffsets,
		OutputOffsets:     info.OutputOffsets,
		Created:           time.Now(),
	}
	for _, st := range m.Stages {
		h.Stages = append(h.Stages, snapshot.Stage{
			Generation: st.Epoch, Index: st.Index, Groups: st.Groups, K: st.K, FirstBits: st.FirstBits,
			Sectors: st.Sectors, Words: st.Words, Counts: st.Counts,
		})
		h.Words += st.Words // the stages' words follow the slots'
	}
	for slot, e := range m.SlotEpochs {
		if e >= 0 {
			h.Gens = append(h.Gens, snapshot.Generation{Number: uint64(e), Start: m.GenerationStart(uint64(e)), Slot: slot})
		}
	}
	// Newest first, as the format wants.
	for i := 1; i < len(h.Gens); i++ {
		for j := i; j > 0 && h.Gens[j].Number > h.Gens[j-1].Number; j-- {
			h.Gens[j], h.Gens[j-1] = h.Gens[j-1], h.Gens[j]
		}
	}
	if h.OutputOffsets == nil {
		h.OutputOffsets = map[int32]int64{}
	}
	return h
}

func metaFromHeader(h snapshot.Header) window.Meta {
	m := window.Meta{
		Generations:       h.Generations,
		Interval:          h.Interval,
		Capacity:          h.Capacity,
		FalsePositiveRate: h.FalsePositiveRate,
		Seed:              h.Seed,
		K:                 h.K,
		FirstBits:         h.FirstBits,
		SectorBits:        h.BlockBits,
		Sectors:           h.Sectors,
		Groups:            h.Groups,
		Slots:             h.Slots,
		SlotUses:          h.SlotUses,
		Origin:            h.Origin,
		Epoch:             h.Epoch,
		Rotations:         h.Rotations,
		Words:             h.SlotWords(),
		ShardBits:         h.ShardBits,
		Fill:              h.Fill,
		SlotEpochs:        make([]int64, max(h.Slots, 0)),
	}
	for _, st := range h.Stages {
		m.Stages = append(m.Stages, window.StageMeta{
			Epoch: st.Generation, Index: st.Index, Groups: st.Groups, K: st.K, FirstBits: st.FirstBits,
			Sectors: st.Sectors, Words: st.Words, Counts: st.Counts,
		})
	}
	for i := range m.SlotEpochs {
		m.SlotEpochs[i] = -1
	}
	for _, g := range h.Gens {
		if g.Slot >= 0 && g.Slot < len(m.SlotEpochs) {
			m.SlotEpochs[g.Slot] = int64(g.Number)
		}
	}
	return m
}
