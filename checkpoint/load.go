package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/kdedup/kdedup/checkpoint/snapshot"
)

// Outcome says how a restore went; its string values are the values of
// the kdedup_checkpoint_restores_total{outcome} label.
type Outcome string

// The possible outcomes of Load.
const (
	// OutcomeWarm means the newest snapshot was restored.
	OutcomeWarm Outcome = "warm"
	// OutcomeFallback means the newest snapshot was unusable and an older
	// one was restored.
	OutcomeFallback Outcome = "fallback"
	// OutcomeCold means no snapshot was restored: there was none, or none
	// was usable. The caller starts without one: with an empty filter, or
	// one rebuilt from elsewhere (kdedup rebuilds it from the output topic).
	OutcomeCold Outcome = "cold"
	// OutcomeRetained means no snapshot was read because the caller still
	// held the unit's state in memory and the store held nothing newer (a
	// partition revoked and assigned again to the same replica). Load never
	// returns it; callers that keep state report it.
	OutcomeRetained Outcome = "retained"
)

// Outcomes returns every Outcome, in the order above: for callers that prepare one metric series
// per outcome.
func Outcomes() []Outcome {
	return []Outcome{OutcomeWarm, OutcomeFallback, OutcomeCold, OutcomeRetained}
}

// ErrIncompatible is for consume functions passed to Load to wrap when a
// snapshot is intact but cannot be used (e.g. its filter parameters or seed
// differ from the current configuration); Load then falls back to the
// previous snapshot as it would for a corrupt one.
var ErrIncompatible = errors.New("checkpoint: snapshot incompatible with the current configuration")

// ErrUntrusted is for consume functions passed to Load to wrap when a snapshot is intact but
// what it claims cannot be what a worker wrote (the store is a trust boundary: anyone who may
// write it can write a snapshot, and recompute its checksums); Load then falls back to the
// previous snapshot as it would for a corrupt one.
var ErrUntrusted = errors.New("checkpoint: snapshot not trusted")

// ErrNoUsableSnapshot is wrapped by LoadResult.Err when snapshots existed
// but every one of them was rejected.
var ErrNoUsableSnapshot = errors.New("checkpoint: no usable snapshot")

// Failure records one snapshot Load rejected and why.
type Failure struct {
	Snapshot Info
	Err      error
}

// LoadResult reports what Load did.
type LoadResult struct {
	// Outcome is warm, fallback or cold.
	Outcome Outcome
	// Snapshot is the snapshot restored (zero for OutcomeCold).
	Snapshot Info
	// Header is the restored snapshot's header (zero for OutcomeCold).
	Header snapshot.Header
	// Failures lists, newest first, every snapshot rejected before the
	// outcome was reached; callers should log them.
	Failures []Failure
	// Epoch is the highest owner epoch among the unit's snapshots, usable
	// or not (0 without any): a new owner of the unit takes an epoch above it.
	Epoch uint64
}

// Err returns nil unless snapshots existed and all were rejected, in which
// case it returns an error wrapping ErrNoUsableSnapshot and every
// failure's error (so errors.Is(err, ErrCorrupt) etc. work on it).
func (r LoadResult) Err() error {
	if r.Outcome != OutcomeCold || len(r.Failures) == 0 {
		return nil
	}
	errs := make([]error, 0, len(r.Failures)+1)
	errs = append(errs, fmt.Errorf("%w: %d snapshot(s) rejected", ErrNoUsableSnapshot, len(r.Failures)))
	for _, f := range r.Failures {
		errs = append(errs, fmt.Errorf("%s: %w", f.Snapshot.Name, f.Err))
	}
	return errors.Join(errs...)
}

// skippable reports whether err condemns one snapshot (so the previous one
// should be tried) rather than the whole restore attempt.
func skippable(err error) bool {
	return errors.Is(err, snapshot.ErrCorrupt) || errors.Is(err, snapshot.ErrNotSnapshot) ||
		errors.Is(err, snapshot.ErrUnknownVersion) || errors.Is(err, ErrIncompatible) ||
		errors.Is(err, ErrUntrusted) || errors.Is(err, fs.ErrNotExist)
}

// Load restores unit from s with the fallback policy: it tries the
// snapshots newest first, leaving out the stale ones (see Store.Snapshots); for each it reads and validates the header and
// calls consume with the header and the decoder positioned at the data.
// consume checks the header (configuration compatibility — wrap
// ErrIncompatible to reject) and reads the data (the Decoder is an
// io.Reader), returning the restored value. After consume
// returns, Load verifies the rest of the file and the trailing checksum;
// only then is the value accepted, so a value built from a snapshot whose
// checksum fails is discarded and never returned.
//
// A snapshot is skipped, recorded in LoadResult.Failures, and the previous
// one tried when opening, decoding, consuming or verifying it fails with an
// error wrapping ErrCorrupt, ErrNotSnapshot, ErrUnknownVersion,
// ErrIncompatible, ErrUntrusted or fs.ErrNotExist (pruned meanwhile). consume must wrap
// errors it gets from the Decoder with %w to keep them classifiable.
//
// Results: OutcomeWarm (the newest snapshot restored), OutcomeFallback (an
// older one), or OutcomeCold (none existed, or all were rejected — then
// LoadResult.Err reports why) with a nil error and the zero T. Any other
// error — listing failed, an I/O error, ctx cancelled, or consume returned
// an error that is none of the above — aborts Load and is returned; the
// caller should retry or stop rather than start cold, because a cold start
// forgets keys the snapshot would have remembered.
//
// consume may be called several times (once per snapshot tried) and must
// not publish anything itself. Load is safe for concurrent use.
func Load[T any](ctx context.Context, s *Store, unit string, consume func(h snapshot.Header, d *snapshot.Decoder) (T, error)) (T, LoadResult, error) {
	var zero T
	res := LoadResult{Outcome: OutcomeCold}
	snaps, err := s.Snapshots(ctx, unit)
	if err != nil {
		return zero, res, err
	}
	if len(snaps) > 0 {
		res.Epoch = snaps[0].Epoch
	}
	for i, snap := range snaps {
		if err := ctx.Err(); err != nil {
			return zero, res, s.errorf("load %s: %w", unit, err)
		}
		v, h, err := loadOne(ctx, s, snap, consume)
		if err == nil {
			res.Snapshot, res.Header = snap, h
			res.Outcome = OutcomeWarm
			if i > 0 {
				res.Outcome = OutcomeFallback
			}
			return v, res, nil
		}
		if !skippable(err) || ctx.Err() != nil {
			return zero, res, s.errorf("load %s from %s: %w", unit, snap.Name, err)
		}
		res.Failures = append(res.Failures, Failure{Snapshot: snap, Err: err})
	}
	return zero, res, nil
}

func loadOne[T any](ctx context.Context, s *Store, snap Info, consume func(h snapshot.Header, d *snapshot.Decoder) (T, error)) (v T, h snapshot.Header, err error) {
	rc, err := s.Open(ctx, snap)
	if err != nil {
		return v, h, err
	}
	defer func() {
		if cerr := rc.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("checkpoint: close: %w", cerr)
		}
	}()
	d := snapshot.NewDecoderSize(ctxReader{ctx, rc}, rc.Size())
	if h, err = d.Header(); err != nil {
		return v, h, err
	}
	if v, err = consume(h, d); err != nil {
		return v, h, err
	}
	if err = d.Verify(); err != nil {
		return v, h, err
	}
	return v, h, nil
}
