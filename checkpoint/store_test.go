package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestValidateUnit(t *testing.T) {
	tests := []struct {
		unit string
		ok   bool
	}{
		{"orders.p3", true},
		{"global", true},
		{"my-topic_v2.p0", true},
		{"A.b-c_d.9", true},
		{strings.Repeat("x", maxUnitLen), true},
		{"", false},
		{strings.Repeat("x", maxUnitLen+1), false},
		{".", false},
		{"..", false},
		{".hidden", false},
		{"a/b", false},
		{"../etc", false},
		{`a\b`, false},
		{"a b", false},
		{"a\x00b", false},
		{"ordérs", false},
		{"a:b", false},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.unit), func(t *testing.T) {
			err := ValidateUnit(tc.unit)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidateUnit(%q) = %v, want ok=%v", tc.unit, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrBadUnit) {
				t.Fatalf("error %v does not wrap ErrBadUnit", err)
			}
			if tc.ok {
				return
			}
			// Every Store method must refuse the name too.
			s := newTestStore(t, 0)
			ctx := context.Background()
			if _, err := s.Save(ctx, tc.unit, writeString("x")); !errors.Is(err, ErrBadUnit) {
				t.Errorf("Save = %v", err)
			}
			if _, err := s.List(ctx, tc.unit); !errors.Is(err, ErrBadUnit) {
				t.Errorf("List = %v", err)
			}
			if err := s.Prune(ctx, tc.unit); !errors.Is(err, ErrBadUnit) {
				t.Errorf("Prune = %v", err)
			}
			if _, err := s.Open(ctx, Info{Unit: tc.unit, Name: tc.unit + ".00000000000000000001.snap"}); !errors.Is(err, ErrBadUnit) {
				t.Errorf("Open = %v", err)
			}
		})
	}
}

func newTestStore(t *testing.T, keep int) *DirStore {
	t.Helper()
	s, err := NewDirStore(filepath.Join(t.TempDir(), "snaps"), keep)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

func readAll(t *testing.T, s Store, info Info) string {
	t.Helper()
	rc, err := s.Open(context.Background(), info)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dirNames lists the directory, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestDirStoreRetention(t *testing.T) {
	tests := []struct {
		keep, saves, want int
	}{
		{keep: 0, saves: 5, want: DefaultKeep},
		{keep: 1, saves: 3, want: 1},
		{keep: 3, saves: 2, want: 2},
		{keep: 3, saves: 7, want: 3},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("keep%d_saves%d", tc.keep, tc.saves), func(t *testing.T) {
			s := newTestStore(t, tc.keep)
			ctx := context.Background()
			var saved []Info
			for i := range tc.saves {
				info, err := s.Save(ctx, "orders.p3", writeString(fmt.Sprintf("snapshot %d", i)))
				if err != nil {
					t.Fatal(err)
				}
				if len(saved) > 0 && info.Seq <= saved[len(saved)-1].Seq {
					t.Fatalf("seq %d not above previous %d", info.Seq, saved[len(saved)-1].Seq)
				}
				if info.Size != int64(len(fmt.Sprintf("snapshot %d", i))) {
					t.Fatalf("info.Size = %d", info.Size)
				}
				saved = append(saved, info)
			}
			list, err := s.List(ctx, "orders.p3")
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != tc.want {
				t.Fatalf("List has %d snapshots, want %d", len(list), tc.want)
			}
			for i, info := range list {
				// Newest first: list[i] is the (i+1)-th most recent save.
				wantInfo := saved[len(saved)-1-i]
				if info.Name != wantInfo.Name || info.Seq != wantInfo.Seq {
					t.Errorf("list[%d] = %s, want %s", i, info.Name, wantInfo.Name)
				}
				if got, want := readAll(t, s, info), fmt.Sprintf("snapshot %d", tc.saves-1-i); got != want {
					t.Errorf("list[%d] holds %q, want %q", i, got, want)
				}
			}
			if names := dirNames(t, s.Dir()); len(names) != tc.want {
				t.Errorf("directory holds %v, want exactly the %d retained snapshots", names, tc.want)
			}
		})
	}
}

func TestDirStoreFailedSaveLeavesNothing(t *testing.T) {
	errWrite := errors.New("filter went away")
	tests := []struct {
		name    string
		write   func(ctx context.Context, cancel func()) func(io.Writer) error
		wantErr error
	}{
		{"write error after data", func(context.Context, func()) func(io.Writer) error {
			return func(w io.Writer) error {
				_, _ = w.Write(make([]byte, 3<<20))
				return errWrite
			}
		}, errWrite},
		{"write error before data", func(context.Context, func()) func(io.Writer) error {
			return func(io.Writer) error { return errWrite }
		}, errWrite},
		{"cancelled during write", func(_ context.Context, cancel func()) func(io.Writer) error {
			return func(w io.Writer) error {
				cancel()
				_, err := w.Write(make([]byte, 3<<20))
				return err
			}
		}, context.Canceled},
		{"cancelled, write ignores errors", func(_ context.Context, cancel func()) func(io.Writer) error {
			return func(w io.Writer) error {
				cancel()
				_, _ = w.Write(make([]byte, 10))
				return nil
			}
		}, context.Canceled},
		{"encode with bad data length", func(context.Context, func()) func(io.Writer) error {
			h := testHeader(1)
			return func(w io.Writer) error {
				return Encode(w, h, func(w io.Writer) error { return WriteWords(w, make([]uint64, h.Words-1)) })
			}
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t, 3)
			prev, err := s.Save(context.Background(), "u", writeString("previous"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, err = s.Save(ctx, "u", tc.write(ctx, cancel))
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("Save = %v, want %v", err, tc.wantErr)
			}
			list, err := s.List(context.Background(), "u")
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 1 || list[0] != prev {
				t.Fatalf("after a failed save List = %+v, want only %+v", list, prev)
			}
			if names := dirNames(t, s.Dir()); !slices.Equal(names, []string{prev.Name}) {
				t.Fatalf("directory holds %v, want only %s (temp file must be removed)", names, prev.Name)
			}
			if got := readAll(t, s, list[0]); got != "previous" {
				t.Fatalf("previous snapshot now holds %q", got)
			}
		})
	}
}

func TestDirStoreSeqStaysMonotonic(t *testing.T) {
	// A snapshot from a replica whose clock ran ahead: the next save must
	// still sort as newest.
	s := newTestStore(t, 3)
	future := uint64(time.Now().Add(24 * time.Hour).UnixNano())
	if err := os.WriteFile(filepath.Join(s.Dir(), snapName("u", future)), []byte("ahead"), 0o644); err != nil {
		t.Fatal(err)
	}
	info, err := s.Save(context.Background(), "u", writeString("new"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Seq != future+1 {
		t.Fatalf("Seq = %d, want %d", info.Seq, future+1)
	}
	list, _ := s.List(context.Background(), "u")
	if len(list) != 2 || list[0].Name != info.Name {
		t.Fatalf("List = %+v, want the new save first", list)
	}
}

func TestDirStoreUnitsDoNotMix(t *testing.T) {
	s := newTestStore(t, 1)
	ctx := context.Background()
	units := []string{"orders", "orders.p3", "orders.p30", "orders.p3.x"}
	for range 2 {
		for _, u := range units {
			if _, err := s.Save(ctx, u, writeString(u)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, u := range units {
		list, err := s.List(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || readAll(t, s, list[0]) != u {
			t.Errorf("unit %s: List = %+v", u, list)
		}
		if _, err := s.Open(ctx, Info{Unit: u, Name: list[0].Name + "x"}); !errors.Is(err, ErrBadUnit) {
			t.Errorf("Open of a non-snapshot name = %v, want ErrBadUnit", err)
		}
	}
	if _, err := s.Open(ctx, Info{Unit: "orders", Name: snapName("orders.p3", 1)}); !errors.Is(err, ErrBadUnit) {
		t.Errorf("Open of another unit's snapshot = %v, want ErrBadUnit", err)
	}
	if names := dirNames(t, s.Dir()); len(names) != len(units) {
		t.Errorf("directory holds %v", names)
	}
}

func TestDirStorePruneTempFiles(t *testing.T) {
	s := newTestStore(t, 3)
	dir := s.Dir()
	old := time.Now().Add(-2 * StaleTempAge)
	files := map[string]bool{ // name → should survive Prune("u")
		".u.123.456.tmp":      false, // stale temp of u
		".u.124.457.tmp":      true,  // fresh temp of u (another replica saving)
		".u.p1.123.456.tmp":   true,  // stale temp of unit u.p1
		"notes.txt":           true,  // foreign file
		".u.x.tmp":            true,  // not our temp pattern
		snapName("other", 10): true,
	}
	for name, survive := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if !survive || name == ".u.p1.123.456.tmp" {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Prune(context.Background(), "u"); err != nil {
		t.Fatal(err)
	}
	for name, survive := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if exists := err == nil; exists != survive {
			t.Errorf("%s: exists=%v, want %v", name, exists, survive)
		}
	}
}

func TestDirStoreOpenPruned(t *testing.T) {
	s := newTestStore(t, 1)
	ctx := context.Background()
	first, err := s.Save(ctx, "u", writeString("1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, "u", writeString("2")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx, first); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of a pruned snapshot = %v, want fs.ErrNotExist", err)
	}
}

// TestDirStorePruneFailureIsReported makes the removal of an old snapshot
// fail (a non-empty directory carries an old snapshot's name, which
// os.Remove cannot delete) and checks that Save reports ErrPrune
// with a valid Info.
func TestDirStorePruneFailureIsReported(t *testing.T) {
	s := newTestStore(t, 1)
	ctx := context.Background()
	blocker := filepath.Join(s.Dir(), snapName("u", 1))
	if err := os.MkdirAll(filepath.Join(blocker, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	info, err := s.Save(ctx, "u", writeString("b"))
	if !errors.Is(err, ErrPrune) {
		t.Fatalf("Save = %v, want ErrPrune", err)
	}
	if got := readAll(t, s, info); got != "b" {
		t.Fatalf("snapshot saved despite ErrPrune holds %q", got)
	}
}

func TestDirStoreConcurrent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared")
	// Two stores over one directory stand for two replicas sharing a volume.
	a, err := NewDirStore(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewDirStore(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h := testHeader(4)
	const units, saves = 6, 8
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for u := range units {
		for _, s := range []*DirStore{a, b} {
			for range 2 { // two writers per unit per store: same-unit serialization
				wg.Go(func() {
					unit := fmt.Sprintf("topic.p%d", u)
					for i := range saves {
						words := testWords(h.Words, uint64(u*1000+i))
						_, err := s.Save(ctx, unit, func(w io.Writer) error {
							return Encode(w, h, func(w io.Writer) error { return WriteWords(w, words) })
						})
						if err != nil && !errors.Is(err, ErrPrune) {
							errs <- err
							return
						}
						if _, err := s.List(ctx, unit); err != nil {
							errs <- err
							return
						}
					}
				})
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for u := range units {
		unit := fmt.Sprintf("topic.p%d", u)
		if err := a.Prune(ctx, unit); err != nil {
			t.Fatal(err)
		}
		list, err := a.List(ctx, unit)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 {
			t.Errorf("%s: %d snapshots after prune, want 2", unit, len(list))
		}
		for _, info := range list {
			rc, err := a.Open(ctx, info)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := decodeAll(rc); err != nil {
				t.Errorf("%s: %v", info.Name, err)
			}
			rc.Close()
		}
	}
	for _, name := range dirNames(t, dir) {
		if strings.HasSuffix(name, ".tmp") {
			t.Errorf("leftover temp file %s", name)
		}
	}
}

// TestDirStoreTempFile looks at the directory while a save is in progress:
// the data goes to a hidden temp file named after the unit and this
// process, and nothing is listed until the save commits.
func TestDirStoreTempFile(t *testing.T) {
	s := newTestStore(t, 3)
	ctx := context.Background()
	_, err := s.Save(ctx, "orders.p3", func(w io.Writer) error {
		names := dirNames(t, s.Dir())
		if len(names) != 1 {
			return fmt.Errorf("directory during save holds %v, want one temp file", names)
		}
		prefix := fmt.Sprintf(".orders.p3.%d.", os.Getpid())
		if !strings.HasPrefix(names[0], prefix) || !isTempOf("orders.p3", names[0]) {
			return fmt.Errorf("temp file %q, want %s<random>.tmp", names[0], prefix)
		}
		if list, err := s.List(ctx, "orders.p3"); err != nil || len(list) != 0 {
			return fmt.Errorf("List during save = %v, %v; want nothing", list, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestHeaderUnit(t *testing.T) {
	tests := []struct {
		scope, topic string
		partition    int32
		want         string
	}{
		{ScopePartition, "orders", 3, "orders.p3"},
		{ScopePartition, "", 0, "p0"},
		{ScopeGlobal, "orders", -1, "global"},
	}
	for _, tc := range tests {
		h := Header{Scope: tc.scope, Topic: tc.topic, Partition: tc.partition}
		if got := h.Unit(); got != tc.want || ValidateUnit(got) != nil {
			t.Errorf("Unit(%s,%q,%d) = %q (valid: %v), want %q", tc.scope, tc.topic, tc.partition, got, ValidateUnit(got), tc.want)
		}
	}
}
