package checkpoint

// Fencing by owner epoch.
//
// Replicas over one location do not lock each other, so a replica that lost a unit without
// knowing it (a process paused past its consumer group session, a zombie) can still save it. Its
// save reads the output topic's end after the new owner produced, and copies a filter that lacks
// what the new owner produced: were it restored, those records' duplicates would pass. Every
// manifest therefore records the owner epoch of the replica that saved it
// (snapshot.Header.OwnerEpoch), a number that grows with every change of owner (the caller's
// business: kdedup derives it from the consumer group generation). The Store enforces three rules:
//
//   - A save whose epoch is below that of a manifest the unit lists when the save begins fails
//     with ErrFenced: a newer owner saved the unit.
//   - A manifest numbered after one of a higher epoch is stale (Snapshots drops it): it was saved
//     by an older owner after a newer one had saved, which only a zombie does. Manifests that are
//     not stale have epochs that never decrease with their numbers.
//   - Pruning keeps the newest Keep manifests that are not stale and never deletes a manifest
//     of an epoch above the pruning save's own.
//
// Manifests written before owner epochs have epoch 0 and order as before.

import (
	"context"
	"errors"
	"fmt"
)

// ErrFenced is wrapped by the error of a save whose owner epoch is below that of a manifest the
// unit already has: a newer owner saved the unit, and this save would hide what it covers.
var ErrFenced = errors.New("checkpoint: a newer owner saved the unit")

// Snapshots returns the unit's snapshots that are not stale (see "Fencing by owner epoch"),
// newest first, with their owner epochs (Info.Epoch); the first one has the unit's highest epoch.
// It reads the header of each manifest it has not read or written before. A unit without
// snapshots yields an empty list and no error.
func (s *Store) Snapshots(ctx context.Context, unit string) ([]Info, error) {
	infos, err := s.List(ctx, unit)
	if err != nil {
		return nil, err
	}
	if err := s.withEpochs(ctx, infos); err != nil {
		return nil, s.errorf("list %s: %w", unit, err)
	}
	live, _ := fence(infos)
	return live, nil
}

// withEpochs fills in the owner epoch of every snapshot of infos.
func (s *Store) withEpochs(ctx context.Context, infos []Info) error {
	for i := range infos {
		m, err := s.meta(ctx, infos[i])
		if err != nil {
			return err
		}
		infos[i].Epoch = m.epoch
	}
	return nil
}

// fence splits infos (newest first, with their epochs) into the live snapshots and the stale
// ones, each newest first: a snapshot is stale when an older one has a higher epoch.
func fence(infos []Info) (live, stale []Info) {
	var high uint64
	keep := make([]bool, len(infos))
	for i := len(infos) - 1; i >= 0; i-- {
		if infos[i].Epoch >= high {
			high, keep[i] = infos[i].Epoch, true
		}
	}
	for i, info := range infos {
		if keep[i] {
			live = append(live, info)
		} else {
			stale = append(stale, info)
		}
	}
	return live, stale
}

// keptBy splits infos (newest first, with their epochs) into the snapshots a prune by a save of
// epoch own keeps (the newest Keep live ones, and every one of an epoch above own) and those it
// deletes, each newest first.
func (s *Store) keptBy(infos []Info, own uint64) (kept, gone []Info) {
	live, _ := fence(infos)
	keep := map[string]bool{}
	for _, info := range live[:min(s.keep, len(live))] {
		keep[info.Name] = true
	}
	for _, info := range infos {
		if keep[info.Name] || info.Epoch > own {
			kept = append(kept, info)
		} else {
			gone = append(gone, info)
		}
	}
	return kept, gone
}

// checkFence returns an error wrapping ErrFenced if a snapshot the unit listed when tx began has
// an owner epoch above epoch.
func (s *Store) checkFence(tx *Txn, epoch uint64) error {
	for _, info := range snapInfos(tx.unit, mapValues(tx.listed)) {
		m, err := s.meta(tx.ctx, info)
		if err != nil {
			return fmt.Errorf("checking the owner epochs: %w", err)
		}
		if m.epoch > epoch {
			return fmt.Errorf("%w: %s has owner epoch %d, this save %d", ErrFenced, info.Name, m.epoch, epoch)
		}
	}
	return nil
}

func mapValues(m map[string]Object) []Object {
	out := make([]Object, 0, len(m))
	for _, o := range m {
		out = append(out, o)
	}
	return out
}
