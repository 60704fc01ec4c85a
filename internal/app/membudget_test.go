package app

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdedup/kdedup/window"
)

// TestCgroupMemoryLimit reads cgroup v2 and v1 limit files, and treats "max", the v1 unlimited
// value and missing files as no limit.
func TestCgroupMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		want                uint64
		ok                  bool
	}{
		{"v2", "memory.max", "2147483648\n", 2 << 30, true},
		{"v2 unlimited", "memory.max", "max\n", 0, false},
		{"v1", "memory/memory.limit_in_bytes", "1073741824\n", 1 << 30, true},
		{"v1 unlimited", "memory/memory.limit_in_bytes", "9223372036854771712\n", 0, false},
		{"garbage", "memory.max", "lots\n", 0, false},
		{"none", "", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.file != "" {
				path := filepath.Join(root, tc.file)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, ok := cgroupMemoryLimit(root)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("cgroupMemoryLimit = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestMemoryBudgetDefault checks DEDUP_MEMORY_LIMIT's default: half the cgroup limit, else
// defaultMemoryLimit; and that a value set wins.
func TestMemoryBudgetDefault(t *testing.T) {
	old := cgroupRoot
	t.Cleanup(func() { cgroupRoot = old })
	cgroupRoot = t.TempDir()
	if got, _ := (DedupConfig{}).MemoryBudget(); got != defaultMemoryLimit {
		t.Fatalf("without a cgroup limit: %d, want %d", got, defaultMemoryLimit)
	}
	if err := os.WriteFile(filepath.Join(cgroupRoot, "memory.max"), []byte("2147483648\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := (DedupConfig{}).MemoryBudget(); got != 1<<30 {
		t.Fatalf("with a 2GiB cgroup limit: %d, want 1GiB", got)
	}
	if got, from := (DedupConfig{MemoryLimit: 256 << 20}).MemoryBudget(); got != 256<<20 || from != "DEDUP_MEMORY_LIMIT" {
		t.Fatalf("set: %d from %q, want 256MiB from DEDUP_MEMORY_LIMIT", got, from)
	}
}

// TestInputMemory checks how DEDUP_MEMORY_LIMIT is split: the input buffers take a quarter of
// it, at most 32 MiB, and the filters the rest.
func TestInputMemory(t *testing.T) {
	for _, tc := range []struct{ limit, input, filters uint64 }{
		{256 << 20, 32 << 20, 224 << 20},
		{64 << 20, 16 << 20, 48 << 20},
		{4 << 30, 32 << 20, 4<<30 - 32<<20},
		{8 << 20, 2 << 20, 6 << 20},
	} {
		d := DedupConfig{MemoryLimit: ByteSize(tc.limit)}
		if in, f := d.InputMemory(), d.FilterMemory(); in != tc.input || f != tc.filters {
			t.Errorf("DEDUP_MEMORY_LIMIT=%d: input %d, filters %d; want %d and %d", tc.limit, in, f, tc.input, tc.filters)
		}
	}
}

// TestRuntimeMemoryLimit checks the Go runtime's soft limit the worker sets when GOMEMLIMIT is
// not set: the input share plus 64 MiB less the file-backed resident memory (at least 16 MiB, at
// most 48 MiB), less 4 MiB and a quarter of the input share (one fetch frame), plus what the filters hold (at most their share) where they are in the Go heap;
// nothing when GOMEMLIMIT is set.
func TestRuntimeMemoryLimit(t *testing.T) {
	b256 := Config{Dedup: DedupConfig{MemoryLimit: 256 << 20}}
	heap := func(filters int64) int64 { // the filters' part of the limit
		if window.FiltersMapped {
			return 0
		}
		return filters
	}
	for _, tc := range []struct {
		name             string
		cfg              Config
		filters, outside uint64
		want             int64
		wantOK           bool
	}{
		{"256MiB budget, filters at their share", b256, 224 << 20, 16 << 20, heap(224<<20) + 68<<20, true},
		{"256MiB budget, filters past it", b256, 300 << 20, 16 << 20, heap(224<<20) + 68<<20, true},
		{"256MiB budget, filters of 8MiB", b256, 8 << 20, 16 << 20, heap(8<<20) + 68<<20, true},
		{"256MiB budget, 24MiB of text", b256, 8 << 20, 24 << 20, heap(8<<20) + 60<<20, true},
		{"256MiB budget, text unknown", b256, 8 << 20, 0, heap(8<<20) + 68<<20, true},
		{"256MiB budget, 60MiB file-backed", b256, 8 << 20, 60 << 20, heap(8<<20) + 36<<20, true},
		{"1MiB budget, full", Config{Dedup: DedupConfig{MemoryLimit: 1 << 20}}, math.MaxUint64, 16 << 20, heap(768<<10) + 44<<20 + 256<<10 - 64<<10, true},
		{"GOMEMLIMIT set", Config{GoMemLimit: "1800MiB", Dedup: DedupConfig{MemoryLimit: 256 << 20}}, 0, 0, 0, false},
		{"GOMEMLIMIT off", Config{GoMemLimit: "off"}, 0, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.cfg.RuntimeMemoryLimit(tc.filters, tc.outside)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("RuntimeMemoryLimit() = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestFileResident checks that fileResident reads RssFile from the process's status, at least
// nonRuntimeMemory, and falls back to nonRuntimeMemory where the file or the line is missing or
// malformed.
func TestFileResident(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, status string
		want         uint64
	}{
		{"24MiB", "Name:\tkdedup\nRssAnon:\t  52400 kB\nRssFile:\t   24576 kB\nRssShmem:\t0 kB\n", 24 << 20},
		{"below the floor", "RssFile:\t1024 kB\n", nonRuntimeMemory},
		{"no line", "Name:\tkdedup\n", nonRuntimeMemory},
		{"malformed", "RssFile:\tlots kB\n", nonRuntimeMemory},
		{"no file", "", nonRuntimeMemory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if tc.status != "" {
				if err := os.WriteFile(path, []byte(tc.status), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			old := procStatus
			procStatus = path
			defer func() { procStatus = old }()
			if got := fileResident(); got != tc.want {
				t.Errorf("fileResident() = %d, want %d", got, tc.want)
			}
		})
	}
}
