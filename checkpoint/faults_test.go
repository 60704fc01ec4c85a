package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/checkpoint/errorfs"
	"github.com/kdedup/kdedup/checkpoint/internal/ckpttest"
	"github.com/kdedup/kdedup/checkpoint/snapshot"
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
		return snapshot.Encode(w, h, func(w io.Writer) error { return snapshot.WriteWords(w, words) })
	})
}

// loadSeed loads unit "u" and returns which saveWords seed its words came from.
func loadSeed(s *checkpoint.Store, seeds ...uint64) (uint64, checkpoint.LoadResult, error) {
	words, res, err := checkpoint.Load(context.Background(), s, "u", func(h snapshot.Header, d *snapshot.Decoder) ([]uint64, error) {
		w := make([]uint64, h.Words)
		if err := d.ReadWords(w); err != nil {
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
