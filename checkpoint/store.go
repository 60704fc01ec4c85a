package checkpoint

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Store keeps the snapshots of named units. A unit is one filter's
// snapshot stream, e.g. "orders.p3" for partition 3 of topic orders or
// "global"; see ValidateUnit for the allowed names. Implementations must be
// safe for concurrent use.
type Store interface {
	// Save atomically stores a new snapshot of unit whose bytes are
	// produced by write; a partial snapshot never becomes visible. On
	// success the complete snapshot is durable and the unit's newest, and
	// old snapshots are pruned. On an error (including one returned by
	// write or a cancelled ctx) nothing new is visible, with two
	// exceptions, both with a valid Info: an error wrapping ErrNotDurable
	// means the complete snapshot became visible but may not survive a
	// crash, and nothing was pruned; an error wrapping ErrPrune means it
	// is durable but older snapshots could not all be removed.
	Save(ctx context.Context, unit string, write func(w io.Writer) error) (Info, error)
	// List returns the unit's snapshots, newest first. A unit without
	// snapshots yields an empty list and no error.
	List(ctx context.Context, unit string) ([]Info, error)
	// Open opens a snapshot returned by List for reading. A snapshot
	// pruned in the meantime yields an error wrapping fs.ErrNotExist.
	Open(ctx context.Context, snap Info) (io.ReadCloser, error)
	// Prune removes all but the newest retained snapshots of unit.
	Prune(ctx context.Context, unit string) error
}

// Info describes one stored snapshot.
type Info struct {
	// Unit is the unit the snapshot belongs to.
	Unit string
	// Name identifies the snapshot within the store (for DirStore, the
	// file name "<unit>.<seq>.snap").
	Name string
	// Seq orders the unit's snapshots: a later save has a larger Seq.
	// DirStore uses the save time in unix nanoseconds, bumped if needed to
	// stay above the newest existing snapshot.
	Seq uint64
	// Size is the snapshot's size in bytes.
	Size int64
	// ModTime is when the snapshot was written.
	ModTime time.Time
}

// DefaultKeep is the number of snapshots per unit DirStore retains when
// NewDirStore is given keep <= 0.
const DefaultKeep = 3

// StaleTempAge is how old an abandoned temporary file (left by a process
// that died while saving) must be before Prune deletes it. It is far longer
// than any save, so another replica's in-progress save is never touched.
const StaleTempAge = time.Hour

// ErrPrune is wrapped by the error Save returns when the snapshot was saved
// durably but removing older snapshots failed; the returned Info is valid.
var ErrPrune = errors.New("checkpoint: pruning old snapshots failed")

// ErrNotDurable is wrapped by the error Save returns when the snapshot was
// committed (it is visible, complete, and the returned Info describes it)
// but making the commit durable failed, so a crash may lose it. Older
// snapshots are then left unpruned, so that one of them survives a crash
// either way.
var ErrNotDurable = errors.New("checkpoint: snapshot visible but not durable")

// ErrBadUnit is wrapped by errors about invalid unit or snapshot names.
var ErrBadUnit = errors.New("checkpoint: invalid unit name")

// maxUnitLen bounds unit names; it leaves room for the sequence number and
// suffix within the usual 255-byte file name limit.
const maxUnitLen = 200

// seqDigits is the width of the zero-padded sequence number in file names.
const seqDigits = 20

// ValidateUnit reports whether unit is a valid unit name: 1 to 200 bytes of
// ASCII letters, digits, '.', '_' and '-', not starting with '.'. These are
// exactly Kafka's topic name characters, so "<topic>.p<partition>" is
// always valid; path separators, "..", and hidden names are not. The error
// wraps ErrBadUnit.
func ValidateUnit(unit string) error {
	if unit == "" || len(unit) > maxUnitLen {
		return fmt.Errorf("%w: %q must be 1 to %d bytes", ErrBadUnit, unit, maxUnitLen)
	}
	if unit[0] == '.' {
		return fmt.Errorf("%w: %q must not start with '.'", ErrBadUnit, unit)
	}
	for i := 0; i < len(unit); i++ {
		c := unit[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q contains %q (allowed: letters, digits, '.', '_', '-')", ErrBadUnit, unit, c)
		}
	}
	return nil
}

// DirStore is a Store keeping snapshots as files in one local directory
// (which may be a volume shared by several replicas). It is safe for
// concurrent use: saves of different units run in parallel, operations on
// one unit are serialized within the process.
//
// Atomic write protocol: Save streams the snapshot into a temporary file
// ".<unit>.<pid>.<random>.tmp" in the same directory (unique per process and
// call), flushes and fsyncs it, renames it to "<unit>.<seq>.snap" (seq is a
// zero-padded 20-digit number, see Info.Seq) and fsyncs the directory. A
// crash at any point leaves either the previous set of snapshots or the new
// one complete — never a partial ".snap" file. Temporary files are ignored
// by List and removed by Prune once older than StaleTempAge.
//
// Retention: after each successful save the newest Keep snapshots of the
// unit are kept and older ones deleted, so a restorer can fall back to the
// previous snapshot when the newest is corrupt (see Load).
//
// Every file operation goes through an FS: OSFS unless the store was made
// with NewDirStoreFS.
type DirStore struct {
	fs   FS
	dir  string
	keep int

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

var _ Store = (*DirStore)(nil)

// NewDirStore returns a DirStore over dir, creating the directory (and its
// parents) if needed. keep is the number of snapshots retained per unit;
// keep <= 0 means DefaultKeep. It fails if dir cannot be created or is not
// a directory.
func NewDirStore(dir string, keep int) (*DirStore, error) {
	return NewDirStoreFS(OSFS{}, dir, keep)
}

// NewDirStoreFS is NewDirStore over the file system fsys instead of OSFS:
// for tests that inject file system failures (see checkpoint/errorfs).
func NewDirStoreFS(fsys FS, dir string, keep int) (*DirStore, error) {
	if keep <= 0 {
		keep = DefaultKeep
	}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: creating snapshot directory: %w", err)
	}
	return &DirStore{fs: fsys, dir: dir, keep: keep, locks: make(map[string]*sync.Mutex)}, nil
}

// Dir returns the directory the store writes to.
func (s *DirStore) Dir() string { return s.dir }

// Keep returns the number of snapshots retained per unit.
func (s *DirStore) Keep() int { return s.keep }

// lock returns the mutex serializing operations on unit.
func (s *DirStore) lock(unit string) *sync.Mutex {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.locks[unit]
	if !ok {
		l = new(sync.Mutex)
		s.locks[unit] = l
	}
	return l
}

// ctxWriter fails writes once ctx is done, so a cancelled save stops early.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// Save implements Store.Save with the atomic write protocol described on
// DirStore. write receives a buffered writer (1 MiB) and must not retain
// it. On failure before the rename nothing new is visible, the temporary
// file has been removed, and the error says what failed. If the directory
// fsync after the rename fails, Save returns the valid Info with an error
// wrapping ErrNotDurable and prunes nothing. If the snapshot was committed
// but pruning older ones failed, Save returns the valid Info together with
// an error wrapping ErrPrune.
func (s *DirStore) Save(ctx context.Context, unit string, write func(w io.Writer) error) (Info, error) {
	if err := ValidateUnit(unit); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("checkpoint: save %s: %w", unit, err)
	}
	l := s.lock(unit)
	l.Lock()
	defer l.Unlock()

	f, err := s.fs.CreateTemp(s.dir, "."+unit+"."+strconv.Itoa(os.Getpid())+".*.tmp")
	if err != nil {
		return Info{}, fmt.Errorf("checkpoint: save %s: %w", unit, err)
	}
	tmp := f.Name()
	committed, closed := false, false
	defer func() {
		if !closed {
			_ = f.Close()
		}
		if !committed {
			_ = s.fs.Remove(tmp)
		}
	}()
	fail := func(what string, err error) (Info, error) {
		return Info{}, fmt.Errorf("checkpoint: save %s: %s: %w", unit, what, err)
	}
	bw := bufio.NewWriterSize(ctxWriter{ctx, f}, 1<<20)
	if err := write(bw); err != nil {
		return fail("writing snapshot", err)
	}
	if err := bw.Flush(); err != nil {
		return fail("writing snapshot", err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fail("chmod", err)
	}
	if err := f.Sync(); err != nil {
		return fail("fsync", err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fail("stat", err)
	}
	closed = true
	if err := f.Close(); err != nil {
		return fail("close", err)
	}
	if err := ctx.Err(); err != nil {
		return fail("before commit", err)
	}

	existing, err := s.list(unit)
	if err != nil {
		return fail("listing", err)
	}
	now := time.Now()
	seq := uint64(max(now.UnixNano(), 0))
	if len(existing) > 0 && existing[0].Seq >= seq {
		seq = existing[0].Seq + 1
	}
	name := snapName(unit, seq)
	if err := s.fs.Rename(tmp, filepath.Join(s.dir, name)); err != nil {
		return fail("rename", err)
	}
	committed = true
	info := Info{Unit: unit, Name: name, Seq: seq, Size: fi.Size(), ModTime: fi.ModTime()}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return info, fmt.Errorf("%w: %s: fsync directory: %w", ErrNotDurable, unit, err)
	}
	if err := s.pruneLocked(unit); err != nil {
		return info, fmt.Errorf("%w: %s: %w", ErrPrune, unit, err)
	}
	return info, nil
}

func snapName(unit string, seq uint64) string {
	return fmt.Sprintf("%s.%0*d.snap", unit, seqDigits, seq)
}

// parseSnapName returns the sequence number if name is a snapshot file of
// unit.
func parseSnapName(unit, name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, unit+".")
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, ".snap")
	if !ok || len(digits) != seqDigits {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	return seq, err == nil
}

// isTempOf reports whether name is a temporary file of unit
// (".<unit>.<pid>.<random>.tmp").
func isTempOf(unit, name string) bool {
	rest, ok := strings.CutPrefix(name, "."+unit+".")
	if !ok {
		return false
	}
	mid, ok := strings.CutSuffix(rest, ".tmp")
	if !ok {
		return false
	}
	pid, rnd, ok := strings.Cut(mid, ".")
	return ok && allDigits(pid) && allDigits(rnd)
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// List implements Store.List. Snapshots removed concurrently (e.g. pruned
// by another replica) are skipped.
func (s *DirStore) List(ctx context.Context, unit string) ([]Info, error) {
	if err := ValidateUnit(unit); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("checkpoint: list %s: %w", unit, err)
	}
	infos, err := s.list(unit)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s: %w", unit, err)
	}
	return infos, nil
}

func (s *DirStore) list(unit string) ([]Info, error) {
	entries, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var infos []Info
	for _, e := range entries {
		seq, ok := parseSnapName(unit, e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		infos = append(infos, Info{Unit: unit, Name: e.Name(), Seq: seq, Size: fi.Size(), ModTime: fi.ModTime()})
	}
	slices.SortFunc(infos, func(a, b Info) int { return cmp.Compare(b.Seq, a.Seq) }) // newest first
	return infos, nil
}

// validateSnap returns an error wrapping ErrBadUnit unless snap names a valid unit and one of its
// snapshots, as Store.Open requires of its argument.
func validateSnap(snap Info) error {
	if err := ValidateUnit(snap.Unit); err != nil {
		return err
	}
	if _, ok := parseSnapName(snap.Unit, snap.Name); !ok {
		return fmt.Errorf("%w: %q is not a snapshot of unit %q", ErrBadUnit, snap.Name, snap.Unit)
	}
	return nil
}

// Open implements Store.Open. The returned reader is the FS's File (an
// *os.File with OSFS), whose Stat and Seek let the decoder check the file
// size against the header before the caller allocates. It fails with an error wrapping ErrBadUnit if snap does not
// name a snapshot of snap.Unit.
func (s *DirStore) Open(ctx context.Context, snap Info) (io.ReadCloser, error) {
	if err := validateSnap(snap); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("checkpoint: open %s: %w", snap.Name, err)
	}
	f, err := s.fs.Open(filepath.Join(s.dir, snap.Name))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: open: %w", err)
	}
	return f, nil
}

// Prune implements Store.Prune: it deletes all but the newest Keep
// snapshots of unit, and temporary files of unit older than StaleTempAge.
// Files already removed by someone else are not an error; other removal
// errors are joined and returned after trying every file.
func (s *DirStore) Prune(ctx context.Context, unit string) error {
	if err := ValidateUnit(unit); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("checkpoint: prune %s: %w", unit, err)
	}
	l := s.lock(unit)
	l.Lock()
	defer l.Unlock()
	if err := s.pruneLocked(unit); err != nil {
		return fmt.Errorf("checkpoint: prune %s: %w", unit, err)
	}
	return nil
}

func (s *DirStore) pruneLocked(unit string) error {
	entries, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return err
	}
	var errs []error
	remove := func(name string) {
		if err := s.fs.Remove(filepath.Join(s.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	type snap struct {
		name string
		seq  uint64
	}
	var snaps []snap
	for _, e := range entries {
		name := e.Name()
		if seq, ok := parseSnapName(unit, name); ok {
			snaps = append(snaps, snap{name, seq})
			continue
		}
		if isTempOf(unit, name) {
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > StaleTempAge {
				remove(name)
			}
		}
	}
	if len(snaps) > s.keep {
		slices.SortFunc(snaps, func(a, b snap) int { return cmp.Compare(b.seq, a.seq) }) // newest first
		for _, sn := range snaps[s.keep:] {
			remove(sn.name)
		}
	}
	return errors.Join(errs...)
}
