package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readDirOnly is an FS without namesFS: DirBackend lists it with ReadDir.
type readDirOnly struct{ FS }

// TestDirListNames checks that List through ReadDirNames and Lstat (OSFS) finds what List through
// ReadDir finds: the regular files of the prefix, not temporary files, directories, symbolic links
// or other units' files, with their sizes.
func TestDirListNames(t *testing.T) {
	dir := t.TempDir()
	for name, size := range map[string]int{"u.1.snap": 3, "u.2.g.abcd": 5, ".u.1.snap.1.2.tmp": 1, "v.1.snap": 2} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "u.dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "v.1.snap"), filepath.Join(dir, "u.link")); err != nil {
		t.Fatal(err)
	}
	list := func(fsys FS) []Object {
		b, err := NewDirBackendFS(fsys, dir)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := b.List(context.Background(), "u.")
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(objs, func(a, b Object) int { return strings.Compare(a.Name, b.Name) })
		return objs
	}
	names, entries := list(OSFS{}), list(readDirOnly{OSFS{}})
	if len(names) != 2 || names[0].Name != "u.1.snap" || names[0].Size != 3 || names[1].Name != "u.2.g.abcd" || names[1].Size != 5 {
		t.Fatalf("List through names = %v, want u.1.snap (3 bytes) and u.2.g.abcd (5 bytes)", names)
	}
	if !slices.EqualFunc(names, entries, func(a, b Object) bool { return a.Name == b.Name && a.Size == b.Size && a.ModTime.Equal(b.ModTime) }) {
		t.Fatalf("List through names = %v, through ReadDir %v", names, entries)
	}
}

// TestDirListManyNames lists a directory whose entries take several reads of the system's
// directory records: every object of the prefix is found once, and no other.
func TestDirListManyNames(t *testing.T) {
	dir := t.TempDir()
	const n = 1500
	for i := range n {
		for _, unit := range []string{"orders.p1", "orders.p10"} {
			name := fmt.Sprintf("%s.%020d.g.%s", unit, i, strings.Repeat("x", i%40))
			if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := NewDirBackend(dir)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := b.List(context.Background(), "orders.p1.")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, o := range objs {
		if !strings.HasPrefix(o.Name, "orders.p1.") || seen[o.Name] {
			t.Fatalf("List returned %s (seen before: %v)", o.Name, seen[o.Name])
		}
		seen[o.Name] = true
	}
	if len(seen) != n {
		t.Fatalf("List found %d objects, want %d", len(seen), n)
	}
}
