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
			s, _ := newMemStore(0)
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

// TestBackendsRefuseBadNames: a backend never touches a path outside its location, whatever name
// it is given.
func TestBackendsRefuseBadNames(t *testing.T) {
	dir, err := NewDirBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, b := range []Backend{dir, NewMemBackend()} {
		for _, name := range []string{"", "../x", "a/b", ".hidden", strings.Repeat("x", maxNameLen+1)} {
			if _, err := b.Create(ctx, name, writeString("x")); !errors.Is(err, ErrBadUnit) {
				t.Errorf("%s: Create(%q) = %v, want ErrBadUnit", b, name, err)
			}
		}
	}
	for _, name := range []string{"../x", "a/b"} {
		if _, err := dir.Open(ctx, name); !errors.Is(err, ErrBadUnit) {
			t.Errorf("Open(%q) = %v, want ErrBadUnit", name, err)
		}
		if err := dir.Delete(ctx, name); !errors.Is(err, ErrBadUnit) {
			t.Errorf("Delete(%q) = %v, want ErrBadUnit", name, err)
		}
	}
}

// TestPruneKeepsOtherObjects: retention only deletes the unit's numbered snapshots; other objects
// of the unit (a later format's manifests, say), other units' snapshots and foreign names stay.
func TestPruneKeepsOtherObjects(t *testing.T) {
	s, b := newMemStore(1)
	others := []string{"u.manifest", snapName("u.p1", 1), "u.notes", "other.00000000000000000001.snap"}
	for _, name := range others {
		b.Put(name, []byte(name))
	}
	ctx := context.Background()
	var last Info
	for i := range 3 {
		info, err := s.Save(ctx, "u", writeString(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		last = info
	}
	objs, err := b.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.Name)
	}
	want := append(slices.Clone(others), last.Name)
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("the store holds %v, want %v", names, want)
	}
}

// TestCheck: Check lists the location, so a missing or unreadable one fails at start-up.
func TestCheck(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "snaps")
	b, err := NewDirBackend(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(b, 0)
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), "file://"+dir) {
		t.Fatalf("Check of a removed directory = %v, want an error naming it", err)
	}
}

func newDirStore(t *testing.T, keep int) (*Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "snaps")
	b, err := NewDirBackend(dir)
	if err != nil {
		t.Fatal(err)
	}
	return NewStore(b, keep), dir
}

func TestDirPruneTempFiles(t *testing.T) {
	s, dir := newDirStore(t, 3)
	old := time.Now().Add(-2 * StaleTempAge)
	files := map[string]bool{ // name → should survive Prune("u")
		"." + snapName("u", 5) + ".123.456.tmp":    false, // stale temp of a snapshot of u
		"." + snapName("u", 6) + ".124.457.tmp":    true,  // fresh temp of u (another replica saving)
		".u.123.456.tmp":                           false, // stale temp of u by an older kdedup
		"." + snapName("u.p1", 5) + ".123.456.tmp": true,  // stale temp of unit u.p1
		".u.p1.123.456.tmp":                        true,  // stale temp of u.p1 by an older kdedup
		".u.notes.123.456.tmp":                     true,  // stale temp of a foreign object
		"notes.txt":                                true,  // foreign file
		".u.x.tmp":                                 true,  // not our temp pattern
		snapName("other", 10):                      true,
	}
	for name, survive := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if !survive || strings.Contains(name, ".123.456.") {
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

// TestDirTempFile looks at the directory while a save is in progress: the data goes to a hidden
// temporary file named after the snapshot and this process, and nothing is listed until the save
// commits.
func TestDirTempFile(t *testing.T) {
	s, dir := newDirStore(t, 3)
	ctx := context.Background()
	_, err := s.Save(ctx, "orders.p3", func(w io.Writer) error {
		names := dirNames(t, dir)
		if len(names) != 1 {
			return fmt.Errorf("directory during save holds %v, want one temp file", names)
		}
		target, ok := tempTarget(names[0])
		_, isSnap := parseSnapName("orders.p3", target)
		if !ok || !isSnap || !strings.Contains(names[0], fmt.Sprintf(".snap.%d.", os.Getpid())) {
			return fmt.Errorf("temp file %q, want .orders.p3.<seq>.snap.%d.<random>.tmp", names[0], os.Getpid())
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

// TestSaveSweepsEvery checks when saves sweep a unit's stale partial writes: on the unit's first
// save in the Store, then not again until sweepEvery has passed (or the clock went back), while
// Prune always sweeps.
func TestSaveSweepsEvery(t *testing.T) {
	s, dir := newDirStore(t, 3)
	ctx := context.Background()
	now := time.Now()
	s.now = func() time.Time { return now }
	stale := "." + snapName("u", 1) + ".123.456.tmp"
	steps := []struct {
		name    string
		advance time.Duration
		prune   bool // Prune instead of Save
		swept   bool
	}{
		{"first save", 0, false, true},
		{"a save a minute later", time.Minute, false, false},
		{"a save just before sweepEvery", sweepEvery - 2*time.Minute, false, false},
		{"Prune", 0, true, true},
		{"a save sweepEvery after the first", time.Minute, false, true},
		{"a save after the clock went back", -time.Hour, false, true},
	}
	for _, st := range steps {
		now = now.Add(st.advance)
		p := filepath.Join(dir, stale)
		old := now.Add(-2 * StaleTempAge)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		var err error
		if st.prune {
			err = s.Prune(ctx, "u")
		} else {
			_, err = s.Save(ctx, "u", func(w io.Writer) error { _, err := w.Write([]byte("x")); return err })
		}
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		_, err = os.Stat(p)
		if swept := errors.Is(err, fs.ErrNotExist); swept != st.swept {
			t.Errorf("%s: stale temp file swept=%v, want %v", st.name, swept, st.swept)
		}
	}
}
