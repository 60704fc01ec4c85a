package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/checkpoint/errorfs"
	"github.com/kdedup/kdedup/checkpoint/snapshot"
	"github.com/kdedup/kdedup/checkpoint/snapshot/snapshottest"
	"github.com/kdedup/kdedup/internal/ckpttest"
)

// faultyStore is a Store over a DirBackend over an errorfs.FS in a fresh directory.
func faultyStore(t *testing.T, keep int) (*checkpoint.Store, string, *errorfs.FS) {
	t.Helper()
	efs := errorfs.New(nil)
	dir := filepath.Join(t.TempDir(), "snaps")
	b, err := checkpoint.NewDirBackendFS(efs, dir)
	if err != nil {
		t.Fatal(err)
	}
	return checkpoint.NewStore(b, keep), dir, efs
}

// saveWords saves a snapshot whose words are WordsForTest(…, seed).
func saveWords(s *checkpoint.Store, seed uint64) (checkpoint.Info, error) {
	h := checkpoint.HeaderForTest(2)
	words := ckpttest.Words(h.Words, seed)
	return s.Save(context.Background(), "u", func(w io.Writer) error {
		return snapshottest.Encode(w, h, func(w io.Writer) error { return snapshottest.WriteWords(w, words) })
	})
}

// loadSeed loads unit "u" and returns which saveWords seed its words came from.
func loadSeed(s *checkpoint.Store, seeds ...uint64) (uint64, checkpoint.LoadResult, error) {
	words, res, err := checkpoint.Load(context.Background(), s, "u", func(h snapshot.Header, d *snapshot.Decoder) ([]uint64, error) {
		w := make([]uint64, h.Words)
		if err := snapshottest.ReadWords(d, w); err != nil {
			return nil, fmt.Errorf("reading words: %w", err)
		}
		return w, nil
	})
	if err != nil || words == nil {
		return 0, res, err
	}
	for _, seed := range seeds {
		if slices.Equal(words, ckpttest.Words(uint64(len(words)), seed)) {
			return seed, res, nil
		}
	}
	return 0, res, errors.New("the loaded words are none of the saved snapshots")
}

// tempFiles returns the temporary files left in dir.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var tmp []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			tmp = append(tmp, e.Name())
		}
	}
	return tmp
}

// TestDirSaveFaults fails each file system operation of a save and proves the store's
// contract: the previous snapshot stays, complete and loadable; nothing partial becomes visible
// and no temporary file is left behind; a failure after the rename is reported as what it is
// (ErrNotDurable, ErrPrune) with the valid Info; and once the disk recovers, the next save works
// and prunes.
func TestDirSaveFaults(t *testing.T) {
	const prevSeed, newSeed, laterSeed = 1, 2, 3
	tests := []struct {
		name    string
		op      errorfs.Op
		err     error
		wantErr error // besides err: the sentinel the failure is reported as, if any
		visible bool  // the new snapshot became visible despite the error
	}{
		{"create temp, no space", errorfs.OpCreate, syscall.ENOSPC, nil, false},
		{"write, no space", errorfs.OpWrite, syscall.ENOSPC, nil, false},
		{"write, I/O error", errorfs.OpWrite, syscall.EIO, nil, false},
		{"fsync", errorfs.OpSync, syscall.EIO, nil, false},
		{"close", errorfs.OpClose, syscall.EIO, nil, false},
		{"list before the write", errorfs.OpList, syscall.EIO, nil, false},
		{"rename", errorfs.OpRename, syscall.EIO, nil, false},
		{"directory fsync after the rename", errorfs.OpSyncDir, syscall.EIO, checkpoint.ErrNotDurable, true},
		{"remove while pruning", errorfs.OpRemove, syscall.EACCES, checkpoint.ErrPrune, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, dir, efs := faultyStore(t, 1)
			prev, err := saveWords(s, prevSeed)
			if err != nil {
				t.Fatal(err)
			}
			efs.Fail(tt.op, tt.err)
			info, err := saveWords(s, newSeed)
			efs.Clear()
			if efs.Injected(tt.op) == 0 {
				t.Fatalf("Save never reached the %s operation", tt.op)
			}
			if !errors.Is(err, tt.err) || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Save = %v, want an error wrapping %v and %v", err, tt.err, tt.wantErr)
			}
			if tmp := tempFiles(t, dir); len(tmp) > 0 {
				t.Errorf("temporary files left behind: %v", tmp)
			}
			list, err := s.List(context.Background(), "u")
			if err != nil {
				t.Fatal(err)
			}
			wantList, wantSeed := []checkpoint.Info{prev}, uint64(prevSeed)
			if tt.visible {
				wantList, wantSeed = []checkpoint.Info{info, prev}, newSeed // nothing pruned
			}
			if !slices.Equal(list, wantList) {
				t.Fatalf("List = %+v, want %+v", list, wantList)
			}
			if seed, res, err := loadSeed(s, prevSeed, newSeed); err != nil || seed != wantSeed || res.Outcome != checkpoint.OutcomeWarm {
				t.Fatalf("Load = snapshot %d (%s), %v; want snapshot %d, warm", seed, res.Outcome, err, wantSeed)
			}

			later, err := saveWords(s, laterSeed)
			if err != nil {
				t.Fatalf("the save after the disk recovered: %v", err)
			}
			if list, _ := s.List(context.Background(), "u"); !slices.Equal(list, []checkpoint.Info{later}) {
				t.Fatalf("after a good save List = %+v, want only %+v (keep 1)", list, later)
			}
		})
	}
}

// TestDirLoadFaults fails the reads of a restore: Load must return the error, never a cold
// start that would forget the snapshot's keys, and return the newest snapshot once reads work.
func TestDirLoadFaults(t *testing.T) {
	tests := []struct {
		name string
		op   errorfs.Op
		err  error
	}{
		{"read, I/O error", errorfs.OpRead, syscall.EIO},
		{"open, I/O error", errorfs.OpOpen, syscall.EIO},
		{"list, I/O error", errorfs.OpList, syscall.EIO},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, efs := faultyStore(t, 2)
			for _, seed := range []uint64{1, 2} {
				if _, err := saveWords(s, seed); err != nil {
					t.Fatal(err)
				}
			}
			efs.Fail(tt.op, tt.err)
			seed, res, err := loadSeed(s, 1, 2)
			if !errors.Is(err, tt.err) || seed != 0 || res.Outcome != checkpoint.OutcomeCold || len(res.Failures) != 0 {
				t.Fatalf("Load = snapshot %d, %+v, %v; want the %v and no snapshot condemned", seed, res, err, tt.err)
			}
			efs.Clear()
			if seed, res, err := loadSeed(s, 1, 2); err != nil || seed != 2 || res.Outcome != checkpoint.OutcomeWarm {
				t.Fatalf("Load after the disk recovered = snapshot %d (%s), %v; want the newest, warm", seed, res.Outcome, err)
			}
		})
	}
}

// TestDirSaveSetFaults fails each file system operation of an incremental save, at a generation
// object or at the manifest, and proves what the commit protocol promises: the previous
// checkpoint stays complete and loadable (every object it references is there), nothing partial
// is left, the failed save's objects are removed, a failure after the manifest's rename is
// reported as what it is (ErrNotDurable, ErrPrune), and the next save works.
func TestDirSaveSetFaults(t *testing.T) {
	prev := map[uint64]uint64{2: 20, 1: 10}
	next := map[uint64]uint64{2: 21, 1: 10} // generation 2 changed: one object and the manifest
	tests := []struct {
		name    string
		op      errorfs.Op
		path    string
		after   int
		wantErr error
		visible bool
	}{
		{"object: create temp", errorfs.OpCreate, ".gen", 0, nil, false},
		{"object: write", errorfs.OpWrite, ".gen", 0, nil, false},
		{"object: fsync", errorfs.OpSync, ".gen", 0, nil, false},
		{"object: rename", errorfs.OpRename, ".gen", 0, nil, false},
		{"object: directory fsync", errorfs.OpSyncDir, "", 0, checkpoint.ErrNotDurable, false},
		{"manifest: create temp", errorfs.OpCreate, ".snap", 0, nil, false},
		{"manifest: write", errorfs.OpWrite, ".snap", 0, nil, false},
		{"manifest: rename", errorfs.OpRename, ".snap", 0, nil, false},
		{"manifest: directory fsync", errorfs.OpSyncDir, "", 1, checkpoint.ErrNotDurable, true},
		{"listing", errorfs.OpList, "", 0, nil, false},
		{"remove while pruning", errorfs.OpRemove, "", 0, checkpoint.ErrPrune, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, dir, efs := faultyStore(t, 1)
			sv := checkpoint.NewSaverForTest(s)
			if _, _, err := sv.Save(prev, nil); err != nil {
				t.Fatal(err)
			}
			if _, _, err := sv.Save(prev, nil); err != nil { // a second manifest for the prune to remove
				t.Fatal(err)
			}
			before := checkpoint.DirNamesForTest(t, dir)
			efs.FailWhen(tt.op, tt.path, tt.after, syscall.EIO)
			_, _, err := sv.Save(next, nil)
			efs.Clear()
			if efs.Injected(tt.op) == 0 {
				t.Fatalf("the save never reached the failed %s", tt.op)
			}
			if !errors.Is(err, syscall.EIO) || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("save = %v, want an error wrapping EIO and %v", err, tt.wantErr)
			}
			if tmp := tempFiles(t, dir); len(tmp) > 0 {
				t.Errorf("temporary files left behind: %v", tmp)
			}
			want := prev
			if tt.visible {
				want = next
			} else if after := checkpoint.DirNamesForTest(t, dir); !slices.Equal(after, before) {
				t.Errorf("the failed save left %v, want %v", after, before)
			}
			if got, res, err := checkpoint.LoadGensForTest(s); err != nil || res.Outcome != checkpoint.OutcomeWarm || !maps.Equal(got, want) {
				t.Fatalf("load = %v (%s), %v; want %v, warm", got, res.Outcome, err, want)
			}
			if _, _, err := sv.Save(map[uint64]uint64{3: 30, 2: 21, 1: 10}, nil); err != nil {
				t.Fatalf("the save after the disk recovered: %v", err)
			}
		})
	}
}
