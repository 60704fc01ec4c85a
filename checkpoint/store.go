package checkpoint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Info describes one stored snapshot.
type Info struct {
	// Unit is the unit the snapshot belongs to.
	Unit string
	// Name identifies the snapshot within the store: "<unit>.<seq>.snap".
	Name string
	// Seq orders the unit's snapshots: the save time in unix nanoseconds, raised above the
	// highest number the unit already had (see Store.SaveSet). A save's Seq is above that of every
	// snapshot of the unit that was visible when the save began — saved by this Store, by an
	// earlier process (a restart) or by another replica over the same location — whatever the
	// clocks say.
	Seq uint64
	// Size is the snapshot's size in bytes.
	Size int64
	// ModTime is when the snapshot was written.
	ModTime time.Time
	// Epoch is the snapshot's owner epoch (snapshot.Header.OwnerEpoch; 0 for a snapshot without
	// one). Only Snapshots fills it in.
	Epoch uint64
}

// DefaultKeep is the number of snapshots per unit a Store retains when it is given keep <= 0.
const DefaultKeep = 3

// StaleTempAge is how old a partial write (a temporary file or a multipart upload, left by a
// process that died while saving) must be before Prune removes it. It is far longer than any
// save, so another replica's save in progress is never touched.
const StaleTempAge = time.Hour

// ErrPrune is wrapped by the error SaveSet returns when the snapshot was saved durably but removing
// older snapshots failed; the returned Info is valid.
var ErrPrune = errors.New("checkpoint: pruning old snapshots failed")

// Store keeps the snapshots of named units in a Backend. A unit is one filter's snapshot stream,
// e.g. "orders.p3" for partition 3 of topic orders, or "global"; see ValidateUnit. The Store is the
// one policy over every backend:
//
//   - Naming: a snapshot is the object "<unit>.<seq>.snap" (see names.go).
//   - Numbering: SaveSet lists the unit and numbers the new snapshot above the highest number listed
//     (see Info.Seq), so a replica whose clock lags, or a restarted process, still saves a newer
//     snapshot. Two replicas saving the same unit at the same moment both succeed, ordered by
//     their clocks.
//   - Locking: operations that change a unit (SaveSet, Prune) are serialized per unit within the
//     Store; different units proceed in parallel. Replicas over one location do not lock each
//     other: every object is written once under a fresh name and becomes visible only complete,
//     and deleting what another replica deleted is not an error.
//   - Retention: after every save the newest Keep snapshots of the unit are kept and older ones
//     deleted, so that Load can fall back to an older snapshot when the newest is damaged; partial
//     writes older than StaleTempAge are swept by Prune, and by a save at most once every
//     sweepEvery per unit (a sweep lists the store once more, and what it finds is an hour old).
//
// A Store is safe for concurrent use. Errors start with "checkpoint: <location>:" and never
// contain credentials.
type Store struct {
	b     Backend
	keep  int
	now   func() time.Time
	locks unitLocks
	refs  refCache

	sweptMu sync.Mutex
	swept   map[string]time.Time // unit → when a save last swept its partial writes
}

// sweepEvery is how often a unit's saves sweep its partial writes.
const sweepEvery = StaleTempAge / 4

// NewStore returns the Store over b, retaining keep snapshots per unit; keep <= 0 means
// DefaultKeep.
func NewStore(b Backend, keep int) *Store {
	if keep <= 0 {
		keep = DefaultKeep
	}
	return &Store{b: b, keep: keep, now: time.Now}
}

// Keep returns the number of snapshots retained per unit.
func (s *Store) Keep() int { return s.keep }

// String returns the store's location as a URL (without credentials).
func (s *Store) String() string { return s.b.String() }

// Kind returns the kind of the store's backend: the scheme of its location, "file", "s3" or
// "mem".
func (s *Store) Kind() string {
	scheme, _, _ := strings.Cut(s.b.String(), "://")
	return scheme
}

func (s *Store) errorf(format string, args ...any) error {
	return fmt.Errorf("checkpoint: %s: "+format, append([]any{s.b}, args...)...)
}

// Check verifies that the location can be listed (with the configured credentials, for S3), so
// that a wrong bucket, endpoint, credential or directory shows at start-up rather than at the
// first save. It lists a name no unit can have, which costs one request whatever the store holds.
// The error names the location.
func (s *Store) Check(ctx context.Context) error {
	if _, err := s.b.List(ctx, ".check"); err != nil {
		return s.errorf("cannot list the store: %w", err)
	}
	return nil
}

// List returns the unit's snapshots, newest first. A unit without snapshots yields an empty list
// and no error. Snapshots deleted concurrently (pruned by another replica) may be missing.
func (s *Store) List(ctx context.Context, unit string) ([]Info, error) {
	if err := ValidateUnit(unit); err != nil {
		return nil, err
	}
	infos, err := s.list(ctx, unit)
	if err != nil {
		return nil, s.errorf("list %s: %w", unit, err)
	}
	return infos, nil
}

// list returns the unit's snapshots, newest first.
func (s *Store) list(ctx context.Context, unit string) ([]Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	objs, err := s.b.List(ctx, unit+".")
	if err != nil {
		return nil, err
	}
	return snapInfos(unit, objs), nil
}

// snapInfos returns the snapshots of unit among objs, newest first.
func snapInfos(unit string, objs []Object) []Info {
	var infos []Info
	for _, o := range objs {
		if seq, ok := parseSnapName(unit, o.Name); ok {
			infos = append(infos, Info{Unit: unit, Name: o.Name, Seq: seq, Size: o.Size, ModTime: o.ModTime})
		}
	}
	slices.SortFunc(infos, func(a, b Info) int { return cmp.Compare(b.Seq, a.Seq) })
	return infos
}

// Open opens a snapshot returned by List for reading. A snapshot pruned in the meantime yields an
// error wrapping fs.ErrNotExist; an Info that does not name a snapshot of its unit one wrapping
// ErrBadUnit. The reader's Size lets the decoder check the snapshot's length before anything is
// allocated (snapshot.NewDecoderSize).
func (s *Store) Open(ctx context.Context, snap Info) (ObjectReader, error) {
	if err := ValidateUnit(snap.Unit); err != nil {
		return nil, err
	}
	if _, ok := parseSnapName(snap.Unit, snap.Name); !ok {
		return nil, fmt.Errorf("%w: %q is not a snapshot of unit %q", ErrBadUnit, snap.Name, snap.Unit)
	}
	if err := ctx.Err(); err != nil {
		return nil, s.errorf("open %s: %w", snap.Name, err)
	}
	r, err := s.b.Open(ctx, snap.Name)
	if err != nil {
		return nil, s.errorf("open %s: %w", snap.Name, err)
	}
	return r, nil
}

// Prune removes all but the newest Keep snapshots of unit, and the unit's partial writes older
// than StaleTempAge. Objects already removed by someone else are not an error; other failures are
// joined and returned after trying everything.
func (s *Store) Prune(ctx context.Context, unit string) error {
	if err := ValidateUnit(unit); err != nil {
		return err
	}
	l := s.locks.lock(unit)
	l.Lock()
	defer l.Unlock()
	if err := s.pruneLocked(ctx, unit, true, math.MaxUint64); err != nil {
		return s.errorf("prune %s: %w", unit, err)
	}
	return nil
}

// sweepDue reports whether a save of unit should sweep its partial writes: on the unit's first
// save in this Store and then once every sweepEvery (or when the clock went back).
func (s *Store) sweepDue(unit string) bool {
	s.sweptMu.Lock()
	defer s.sweptMu.Unlock()
	now := s.now()
	if last, ok := s.swept[unit]; ok && now.Sub(last) < sweepEvery && !now.Before(last) {
		return false
	}
	if s.swept == nil {
		s.swept = map[string]time.Time{}
	}
	s.swept[unit] = now
	return true
}

// pruneLocked deletes what retention lets go of (see keptBy: never a manifest of an owner epoch
// above own, the epoch of the save that prunes), and sweeps the unit's stale partial writes if
// sweep is set. The caller holds the unit's lock.
func (s *Store) pruneLocked(ctx context.Context, unit string, sweep bool, own uint64) error {
	objs, err := s.b.List(ctx, unit+".")
	if err != nil {
		return fmt.Errorf("listing: %w", err)
	}
	infos := snapInfos(unit, objs)
	if err := s.withEpochs(ctx, infos); err != nil {
		return err // without the epochs nothing is known safe to delete
	}
	kept, gone := s.keptBy(infos, own)
	var errs []error
	for _, info := range gone {
		if err := s.b.Delete(ctx, info.Name); err != nil {
			errs = append(errs, fmt.Errorf("deleting %s: %w", info.Name, err))
		}
	}
	s.refs.retain(unit, kept)
	if err := s.pruneGens(ctx, unit, objs, kept); err != nil {
		errs = append(errs, err)
	}
	// A temporary file of an older kdedup is named after its unit alone.
	partial := func(name string) bool {
		_, snap := parseSnapName(unit, name)
		_, gen := parseGenName(unit, name)
		return snap || gen || name == unit
	}
	if !sweep {
		return errors.Join(errs...)
	}
	if err := s.b.Sweep(ctx, unit, s.now().Add(-StaleTempAge), partial); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// pruneGens deletes the generation objects of unit that no kept snapshot references and that no
// save under way can still reference: those written by a save numbered below the oldest kept
// snapshot (a save numbers itself above every snapshot it lists), and those older than
// StaleTempAge (left by a save that failed in a process that died).
func (s *Store) pruneGens(ctx context.Context, unit string, objs []Object, kept []Info) error {
	type gen struct {
		Object
		seq uint64
	}
	var gens []gen
	for _, o := range objs {
		if seq, ok := parseGenName(unit, o.Name); ok {
			gens = append(gens, gen{o, seq})
		}
	}
	if len(gens) == 0 {
		return nil
	}
	refs, err := s.referenced(ctx, unit, kept)
	if err != nil {
		return err
	}
	oldest := uint64(0)
	if len(kept) > 0 {
		oldest = kept[len(kept)-1].Seq
	}
	stale := s.now().Add(-StaleTempAge)
	var errs []error
	for _, g := range gens {
		if refs[g.Name] || g.seq >= oldest && !g.ModTime.Before(stale) {
			continue
		}
		if err := s.b.Delete(ctx, g.Name); err != nil {
			errs = append(errs, fmt.Errorf("deleting %s: %w", g.Name, err))
		}
	}
	return errors.Join(errs...)
}

// unitLocks hands out one mutex per unit name.
type unitLocks struct {
	mu sync.Mutex
	m  map[string]*sync.Mutex
}

func (u *unitLocks) lock(unit string) *sync.Mutex {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = make(map[string]*sync.Mutex)
	}
	l, ok := u.m[unit]
	if !ok {
		l = new(sync.Mutex)
		u.m[unit] = l
	}
	return l
}
