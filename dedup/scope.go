package dedup

// Scopes.
//
// What differs between scopes is behind one type, scope, chosen once when the Set is built
// (Scope.kind): which filter a partition's records go to, how a partition's state is prepared,
// given up, discarded and checkpointed, what the snapshot unit of a partition is called, which
// output partitions a unit owns for its re-warm and rebuild, and which of the snapshot format's
// scopes its snapshots record. The rest of the Set knows no scope names.
//
// Two kinds exist:
//   - perPartition (ScopePartition, and ScopeRouted, whose input is the route topic): one filter
//     per partition, single-writer, prepared on Assign and saved and parked on Revoke; the unit
//     "<topic>.p<partition>" owns the output partitions the OutputLog names for the partition.
//   - sharedScope (ScopeGlobal, global.go): one filter for every partition, prepared in NewSet,
//     saved periodically and on Close, rebuilt after a Discard; the unit "global" owns every
//     output partition (OutputLog partition -1).

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/kdedup/kdedup/checkpoint/snapshot"
	"github.com/kdedup/kdedup/window"
)

// scopeKind is what a Scope name selects: the snapshot format's scope its units record, whether
// one filter serves every partition (so that it is not single-writer), and the scope behaviour a
// Set gets.
type scopeKind struct {
	snapshot string
	shared   bool
	new      func(*Set) scope
}

// scopeKinds maps every Scope to its kind; ParseScope accepts exactly its keys. A scope with a
// filter per partition records snapshot.ScopePartition, so that a scope can be added without a
// format change.
var scopeKinds = map[Scope]scopeKind{
	ScopePartition: {snapshot: snapshot.ScopePartition, new: newPerPartition},
	ScopeRouted:    {snapshot: snapshot.ScopePartition, new: newPerPartition},
	ScopeGlobal:    {snapshot: snapshot.ScopeGlobal, shared: true, new: newShared},
}

// kind returns the scope kind of s; s must be a valid Scope (see ParseScope).
func (s Scope) kind() scopeKind { return scopeKinds[s] }

// scope is the behaviour of a Set that depends on its Scope. Its methods are called by the Set's
// methods of the same purpose and have their concurrency contracts.
type scope interface {
	// start prepares what the scope needs before the first Assign (NewSet).
	start(ctx context.Context) error
	// unit returns the snapshot unit name of partition's state.
	unit(partition int32) string
	// prepare returns the filter of a newly assigned partition, its stream time and its lineage;
	// a nil filter means the partition is served by the scope's shared filter (see serving).
	prepare(ctx context.Context, partition int32) (*window.Filter, *eventClock, lineage, error)
	// serving returns the filter and stream time that serve a partition whose prepared filter is
	// f and ev. The Set calls it under mu.
	serving(f *window.Filter, ev *eventClock) (*window.Filter, *eventClock)
	// revoke gives up the state of pt, the part of a partition just removed.
	revoke(ctx context.Context, partition int32, pt *part) error
	// discard drops the state of pt, the part of a partition just removed, without saving it.
	discard(partition int32, pt *part)
	// stats returns the state of every filter, and the filters, for Set.Stats.
	stats() ([]FilterStats, []*window.Filter)
	// checkpoint snapshots every filter now, for the checkpoint loop.
	checkpoint(ctx context.Context) error
	// close saves and releases the scope's own filters at Close, before the partitions left
	// are revoked.
	close(ctx context.Context) error
	// sealed returns the partitions whose acknowledgements a snapshot of a filter that parts
	// feed must wait for.
	sealed(parts map[int32]*part) []map[int32]*part
	// tainted reports whether the scope's filters may hold identities of records that never
	// reached the output topic: no snapshot may be taken then.
	tainted() bool
	// ownershipChecked reports whether saves must confirm the consumer group generation's
	// ownership (see Set.mayProceed).
	ownershipChecked() bool
}

// perPartition is the scope of a filter per partition (ScopePartition, ScopeRouted).
type perPartition struct{ s *Set }

func newPerPartition(s *Set) scope { return perPartition{s: s} }

func (perPartition) start(context.Context) error { return nil }

func (p perPartition) unit(partition int32) string {
	return p.s.cfg.Topic + ".p" + strconv.Itoa(int(partition))
}

// prepare returns the parked filter if it may serve (see unpark), else the one open prepares
// from the store. When the assignment is called off (ctx ends) after open prepared the filter,
// the filter is as current as a revoked one, so it is parked for the next generation.
func (p perPartition) prepare(ctx context.Context, partition int32) (*window.Filter, *eventClock, lineage, error) {
	s, unit := p.s, p.unit(partition)
	if f, ev, lin, ok, err := s.unpark(ctx, unit, partition); ok || err != nil {
		return f, ev, lin, err
	}
	ev := s.newEventClock()
	f, lin, _, err := s.open(ctx, unit, partition, ev)
	if err != nil {
		return nil, nil, lineage{}, err
	}
	if err := ctx.Err(); err != nil {
		s.park(partition, newPart(f, ev, lin))
		return nil, nil, lineage{}, fmt.Errorf("dedup: preparing %s: %w", unit, err)
	}
	startRotation(f, ev)
	return f, ev, lin, nil
}

func (perPartition) serving(f *window.Filter, ev *eventClock) (*window.Filter, *eventClock) {
	return f, ev
}

// revoke saves the partition's state through the Persister (or, without one, reads the output
// end offsets that its lineage needs), stops the filter and parks it, in case the partition
// comes back (see "Retained partitions" in retain.go). The state is parked even if saving fails.
func (p perPartition) revoke(ctx context.Context, partition int32, pt *part) error {
	s, unit := p.s, p.unit(partition)
	pt.f.Close()
	var res saveResult
	var err error
	if s.cfg.Persister != nil {
		start := time.Now()
		res, err = s.save(ctx, unit, pt.f, partition, map[int32]*part{partition: pt}, &pt.mark, nil, pt.lineage().epoch)
		s.releases.add(start, res.stats, err)
		s.cfg.Logger.Debug("final checkpoint", "unit", unit, "unchanged", res.stats.Skipped,
			"bytes_written", res.stats.Written, "objects_written", res.stats.Created, "took", time.Since(start).String())
	} else if s.cfg.Output != nil {
		res.out, err = s.cfg.Output.End(ctx, partition)
		if err != nil {
			err = fmt.Errorf("dedup: revoking %s: reading output end offsets: %w", unit, err)
		}
	}
	pt.saved(res, err)
	s.park(partition, pt)
	return err
}

func (perPartition) discard(_ int32, pt *part) {
	pt.f.Close()
	pt.f.Release()
}

func (p perPartition) stats() ([]FilterStats, []*window.Filter) {
	cur := p.s.parts.Load().byID
	out := make([]FilterStats, 0, len(cur))
	filters := make([]*window.Filter, 0, len(cur))
	for _, q := range slices.Sorted(maps.Keys(cur)) {
		out = append(out, filterStats(strconv.Itoa(int(q)), cur[q].f, cur[q].ev))
		filters = append(filters, cur[q].f)
	}
	return out, filters
}

func (p perPartition) checkpoint(ctx context.Context) error { return p.s.checkpointParts(ctx) }

func (perPartition) close(context.Context) error { return nil }

func (perPartition) sealed(parts map[int32]*part) []map[int32]*part { return []map[int32]*part{parts} }

func (perPartition) tainted() bool { return false }

func (perPartition) ownershipChecked() bool { return true }

// startRotation starts the rotation of a prepared filter under ClockProcessing; under ClockEvent (ev not
// nil) the records rotate it.
func startRotation(f *window.Filter, ev *eventClock) {
	if ev == nil {
		f.Start()
	}
}
