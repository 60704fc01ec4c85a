package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/ckpttest"
)

// inspectFixture is a snapshot with known fill: 2 groups × 4 slots × 128-bit
// blocks, k=4. Slot 2 (generation 0) is saturated, slot 0 (generation 1) is
// half full, slot 1 (generation 2) is empty, slot 3 is unused with 4 bits.
func inspectFixture() (Header, []uint64) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := Header{
		Generations: 3, Interval: time.Minute, Capacity: 50, FalsePositiveRate: 0.01,
		Seed: 0xabc, K: 4, FirstBits: 4, SectorBits: 128, Sectors: 1, Groups: 2, Slots: 4, Words: 16,
		SlotUses: []uint64{0, 0, 1, 0}, // matches the words' top bits, so v3 reads them all
		Origin:   base.Add(-7 * time.Minute), Epoch: 9, Rotations: 8,
		Gens: []Generation{
			{Number: 9, Start: base.Add(2 * time.Minute), Slot: 2},
			{Number: 8, Start: base.Add(time.Minute), Slot: 0},
			{Number: 7, Start: base, Slot: 1},
		},
		Scope: ScopePartition, Topic: "clicks", Partition: 5,
		InputOffsets:  map[int32]int64{5: 777},
		OutputOffsets: map[int32]int64{0: 10, 1: 20},
		Created:       base.Add(2*time.Minute + 15*time.Second),
	}
	words := make([]uint64, h.Words)
	for i := range words {
		switch slot := (i / 2) % 4; slot {
		case 0:
			words[i] = 0x00000000ffffffff
		case 2:
			words[i] = ^uint64(0)
		case 3:
			words[i] = 1 << (i % 64)
		}
	}
	return h, words
}

// genRows returns the generation table rows of an Inspect report, split
// into fields.
func genRows(report string) [][]string {
	var rows [][]string
	in := false
	for line := range strings.Lines(report) {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "gen":
			in = true
		case in && len(f) == 8:
			rows = append(rows, f)
		default:
			in = false
		}
	}
	return rows
}

func TestInspect(t *testing.T) {
	h, words := inspectFixture()
	good := encodeBytes(t, h, VersionV2, words)
	var out bytes.Buffer
	if err := Inspect(&out, bytes.NewReader(good)); err != nil {
		t.Fatalf("Inspect: %v\n%s", err, out.String())
	}
	report := out.String()
	t.Logf("report:\n%s", report)
	squeezed := squeeze(report)

	if strings.Contains(report, "0xabc") || strings.Contains(report, "0000000000000abc") || strings.Contains(report, "2748") {
		t.Errorf("the report shows the hash seed (0xabc), not only its fingerprint")
	}
	if SeedFingerprint(0xabc) == SeedFingerprint(0xabd) || len(SeedFingerprint(0xabc)) != 16 {
		t.Errorf("fingerprints %s, %s", SeedFingerprint(0xabc), SeedFingerprint(0xabd))
	}
	wantRows := [][]string{
		// gen number slot start age fill keys fpr
		{"0", "9", "2", "2026-01-02T03:06:05Z", "15s", "1.0000", "+Inf", "1"},
		{"1", "8", "0", "2026-01-02T03:05:05Z", "1m15s", "0.5000", "44", "0.0625"},
		{"2", "7", "1", "2026-01-02T03:04:05Z", "2m15s", "0.0000", "0", "0"},
	}
	if rows := genRows(report); !slices.EqualFunc(rows, wantRows, slices.Equal[[]string]) {
		t.Errorf("generation rows = %q, want %q", rows, wantRows)
	}
	for _, want := range []string{
		"KDDPSNAP version 2",
		"created: 2026-01-02T03:06:20Z",
		"partition 5 of topic \"clicks\"",
		"3 generations × 1m0s = 3m0s",
		"k=4 seed fingerprint=" + SeedFingerprint(0xabc),
		"2 groups × 4 slots × 1 sectors of 128 bits = 16 words (128 B), 256 bits per generation",
		"note: format version 2 holds the filter layout of an older kdedup; this build cannot restore it",
		"epoch: current generation 9, 8 rotations, origin 2026-01-02T02:57:05Z",
		"free slots: slot 3 fill 0.0156",
		"estimated FPR: 1.06 (sum of fill^k",
		"input offsets (next offset to consume):\npartition 5: 777\n",
		"output offsets (high-water at snapshot):\npartition 0: 10\npartition 1: 20\n",
		"header checksum: OK",
		"file length: OK",
		"file checksum: OK",
	} {
		if !strings.Contains(squeezed, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestInspectV3 checks what version 3 adds: sectors, the slot use table, and
// fill that counts neither tag bits nor words of a slot's previous use; and
// that version 5 counts the words of sector 0, stored word-major, for the
// right slots.
func TestInspectV3(t *testing.T) {
	for _, version := range []uint16{VersionV3, VersionV5} {
		h, _ := inspectFixture()
		h.Sectors, h.Words, h.SlotUses = 2, 32, []uint64{2, 0, 1, 4}
		words := make([]uint64, h.Words)
		for i := range words {
			slot, first := (i/2)%4, (i/8)%2 == 0 // 2-word sectors, 4 slots, 8 words per sector of a group
			if q := i % 16; version >= VersionV5 && q < 8 {
				slot = q % 4 // sector 0: word w of slot s is word 4w+s of the group
			}
			switch {
			case slot == 0 && first: // first sector of each block: current use
				words[i] = 0x00000000ffffffff
			case slot == 0: // second sector: written by use 1 (odd), so stale
				words[i] = 1<<63 | 0x00000000ffffffff
			case slot == 2: // use 1: all 63 data bits, tag 1
				words[i] = ^uint64(0)
			}
		}
		var out bytes.Buffer
		if err := Inspect(&out, bytes.NewReader(encodeBytes(t, h, version, words))); err != nil {
			t.Fatalf("Inspect: %v\n%s", err, out.String())
		}
		report := out.String()
		t.Logf("report:\n%s", report)
		wantRows := [][]string{
			// slot 2: 8 words × 63 bits, all set; slot 0: 4 current words × 32 bits of 8 × 63
			{"0", "9", "2", "2026-01-02T03:06:05Z", "15s", "1.0000", "+Inf", "1"},
			{"1", "8", "0", "2026-01-02T03:05:05Z", "1m15s", "0.2540", "37", "0.00416"},
			{"2", "7", "1", "2026-01-02T03:04:05Z", "2m15s", "0.0000", "0", "0"},
		}
		if rows := genRows(report); !slices.EqualFunc(rows, wantRows, slices.Equal[[]string]) {
			t.Errorf("v%d: generation rows = %q, want %q", version, rows, wantRows)
		}
		for _, want := range []string{
			fmt.Sprintf("KDDPSNAP version %d", version),
			"2 groups × 4 slots × 2 sectors of 128 bits = 32 words (256 B), 512 bits per generation",
			"slot uses: [2 0 1 4]",
			"file checksum: OK",
		} {
			if !strings.Contains(squeeze(report), want) {
				t.Errorf("v%d: report lacks %q", version, want)
			}
		}
	}
}

func TestInspectDamaged(t *testing.T) {
	h, words := inspectFixture()
	good := encodeBytes(t, h, VersionV4, words) // the fixture's words are in the sector-major layout
	hv1 := encodeBytes(t, h, VersionV1, words)
	topicAt := bytes.Index(good, []byte("clicks"))
	tests := []struct {
		name    string
		in      []byte
		kind    int // index into readerKinds
		wantErr error
		want    []string // substrings of the report; nil: no report at all
	}{
		{"bad data byte", flip(good, len(good)-10), 0, ErrCorrupt,
			[]string{"header checksum: OK", "file length: OK", "file checksum: MISMATCH", "1.0000"}},
		{"bad header byte still parses", flip(good, topicAt), 0, ErrCorrupt,
			[]string{"header checksum: MISMATCH", "file checksum: MISMATCH", "of topic \"glicks\""}},
		{"truncated data, seekable", good[:len(good)-40], 0, ErrCorrupt,
			[]string{"PARTIAL", "file length: MISMATCH", "file checksum: NOT VERIFIED"}},
		{"truncated data, stream", good[:len(good)-40], 1, ErrCorrupt,
			[]string{"PARTIAL", "file checksum: NOT VERIFIED"}},
		{"v1 has no output offsets", hv1, 0, nil,
			[]string{"version 1", "output offsets (high-water at snapshot): not recorded (format version 1)", "file checksum: OK"}},
		{"foreign file", []byte("#!/bin/sh\necho hi\n"), 0, ErrNotSnapshot, nil},
		{"header cut short", good[:40], 0, ErrCorrupt, nil},
		{"newer version", func() []byte { b := slices.Clone(good); b[8] = byte(CurrentVersion + 1); return b }(), 0, ErrUnknownVersion, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Inspect(&out, readerKinds[tc.kind].wrap(tc.in))
			if (tc.wantErr == nil) != (err == nil) || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("Inspect = %v, want %v", err, tc.wantErr)
			}
			if tc.want == nil && out.Len() != 0 {
				t.Errorf("Inspect wrote a report for an unreadable header:\n%s", out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(squeeze(out.String()), w) {
					t.Errorf("report lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// squeeze collapses runs of spaces in each line, so checks do not depend
// on column widths.
func squeeze(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		b.WriteString(strings.Join(strings.Fields(line), " "))
		b.WriteByte('\n')
	}
	return b.String()
}

func flip(b []byte, i int) []byte {
	c := slices.Clone(b)
	c[i] ^= 0x04
	return c
}

func TestInspectWriteError(t *testing.T) {
	h, words := inspectFixture()
	good := encodeBytes(t, h, SingleFileVersion, words)
	for _, n := range []int64{0, 100, 1000} {
		if err := Inspect(&limitWriter{n: n}, bytes.NewReader(good)); !errors.Is(err, errLimit) {
			t.Errorf("writer failing after %d bytes: Inspect = %v, want errLimit", n, err)
		}
	}
}

// TestInspectLargeIsStreamed checks Inspect's memory does not grow with the
// snapshot: a 16 MiB snapshot inspected through a stream allocates a small
// fraction of that.
func TestInspectLargeIsStreamed(t *testing.T) {
	h := testHeader(1 << 15) // 2 Mi words = 16 MiB
	b := encodeBytes(t, h, SingleFileVersion, ckpttest.Words(h.Words, 1))
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	if err := Inspect(io.Discard, streamOnly{bytes.NewReader(b)}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&ms1)
	if alloc := ms1.TotalAlloc - ms0.TotalAlloc; alloc > 2<<20 {
		t.Errorf("Inspect of a %d-byte snapshot allocated %d bytes", len(b), alloc)
	}
}
