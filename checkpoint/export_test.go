package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// For the tests of package checkpoint_test (faults_test.go), which import checkpoint/errorfs and
// so cannot be in package checkpoint.
var HeaderForTest = testHeader

// DirNamesForTest lists a directory (contract_test.go).
var DirNamesForTest = dirNames

// The incremental saver of incremental_test.go, for faults_test.go.

// NewSaverForTest returns a saver of unit "u" over s.
var NewSaverForTest = newSaver

// Save saves generations (number → seed of their words), writing those that changed.
func (sv *saver) Save(gens map[uint64]uint64, beforeCommit func(*Txn) error) (Info, SaveStats, error) {
	return sv.save(ckpt(gens), beforeCommit)
}

// LoadGensForTest loads unit "u" as saved by a saver.
func LoadGensForTest(s *Store) (map[uint64]uint64, LoadResult, error) {
	c, res, err := loadCkpt(s)
	return c, res, err
}

// Save stores a new snapshot of unit whose bytes write produces, as kdedup saved single-file
// (version 5) snapshots before manifests: for the tests, which store snapshots of their own; a partial snapshot never
// becomes visible. write must not retain its writer. On success the complete snapshot is durable
// and the unit's newest, and old snapshots are pruned (see Store).
//
// On an error (including one returned by write, or a done ctx) nothing new is visible and the
// error says what failed, with two exceptions, both with a valid Info: an error wrapping
// ErrNotDurable means the complete snapshot became visible but may not survive a crash, and
// nothing was pruned; an error wrapping ErrPrune means it is durable but older snapshots could
// not all be removed. An invalid unit yields an error wrapping ErrBadUnit.
func (s *Store) Save(ctx context.Context, unit string, write func(w io.Writer) error) (Info, error) {
	if err := ValidateUnit(unit); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, s.errorf("save %s: %w", unit, err)
	}
	l := s.locks.lock(unit)
	l.Lock()
	defer l.Unlock()
	existing, err := s.list(ctx, unit)
	if err != nil {
		return Info{}, s.errorf("save %s: listing: %w", unit, err)
	}
	seq := nextSeq(existing, s.now())
	obj, err := s.b.Create(ctx, snapName(unit, seq), func(w io.Writer) error { return write(ctxWriter{ctx, w}) })
	info := Info{Unit: unit, Name: obj.Name, Seq: seq, Size: obj.Size, ModTime: obj.ModTime}
	switch {
	case errors.Is(err, ErrNotDurable):
		return info, s.errorf("save %s: %w", unit, err)
	case err != nil:
		return Info{}, s.errorf("save %s: %w", unit, err)
	}
	if err := s.pruneLocked(ctx, unit, s.sweepDue(unit), 0); err != nil {
		return info, fmt.Errorf("%w: %s in %s: %w", ErrPrune, unit, s.b, err)
	}
	return info, nil
}
