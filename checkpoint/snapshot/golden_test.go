package snapshot

import (
	"bytes"
	"encoding/binary"
	"flag"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// Regenerate with: go test ./checkpoint/snapshot -run TestGolden -update
var update = flag.Bool("update", false, "rewrite checkpoint/snapshot/testdata/golden-*.snap")

// goldenHeader is the header stored in the golden files. Never change it
// without regenerating them, and never regenerate them to hide a format
// change: a decoder must keep reading files written by older builds.
func goldenHeader() Header {
	base := time.Date(2025, 11, 21, 10, 0, 0, 0, time.UTC)
	return Header{
		Generations:       3,
		Interval:          10 * time.Minute,
		Capacity:          1_000_000,
		FalsePositiveRate: 1e-4,
		Seed:              0x0123456789abcdef,
		K:                 10,
		SectorBits:        512,
		Sectors:           1,
		Groups:            2,
		Slots:             4,
		Words:             2 * 4 * 8,
		Origin:            base.Add(-1232 * 10 * time.Minute),
		Epoch:             1234,
		Rotations:         1200,
		Gens: []Generation{
			{Number: 1234, Start: base.Add(20 * time.Minute), Slot: 3},
			{Number: 1233, Start: base.Add(10 * time.Minute), Slot: 0},
			{Number: 1232, Start: base, Slot: 1},
		},
		Scope:         ScopePartition,
		Topic:         "orders",
		Partition:     3,
		InputOffsets:  map[int32]int64{3: 98765},
		OutputOffsets: map[int32]int64{0: 500, 1: 700, 2: 11},
		Created:       base.Add(25*time.Minute + 5*time.Second),
	}
}

// goldenHeaderV3 is the header of golden-v3.snap: goldenHeader's filter in
// the sectorized layout, with two sectors per block and a slot use table.
func goldenHeaderV3() Header {
	h := goldenHeader()
	h.Sectors = 2
	h.Words = 2 * 4 * 2 * 8
	h.SlotUses = []uint64{309, 0, 308, 310}
	return h
}

// goldenHeaderV4 is the header of golden-v4.snap: goldenHeaderV3's filter
// with a fill table and one grown stage of its newest generation.
func goldenHeaderV4() Header { return withStages(goldenHeaderV3()) }

// goldenHeaderV5 is the header of golden-v5.snap: goldenHeaderV4's filter in
// the interleaved layout, 4 of the k bits in one word of sector 0.
func goldenHeaderV5() Header {
	h := goldenHeaderV4()
	h.FirstBits = 4
	return h
}

// goldenWords is the data stored in the golden files: slot s of every group
// has every word set to a pattern with 8×(s+1) bits set (slot 3: all bits).
func goldenWords(h Header) []uint64 {
	w := make([]uint64, h.Words)
	wpb := h.SectorBits / 64
	for i := range w {
		slot := (i / wpb) % h.Slots
		w[i] = (uint64(1)<<(8*(slot+1)) - 1) << (i % 8)
		if slot == 3 {
			w[i] = ^uint64(0)
		}
	}
	return w
}

func TestGolden(t *testing.T) {
	tests := []struct {
		file    string
		version uint16
		header  func() Header
	}{
		{"golden-v1.snap", VersionV1, goldenHeader},
		{"golden-v2.snap", VersionV2, goldenHeader},
		{"golden-v3.snap", VersionV3, goldenHeaderV3},
		{"golden-v4.snap", VersionV4, goldenHeaderV4},
		{"golden-v5.snap", VersionV5, goldenHeaderV5},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file)
			h := tc.header()
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, encodeBytes(t, h, tc.version, goldenWords(h)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want := asDecoded(h, tc.version)

			f, err := os.Open(path)
			if err != nil {
				t.Fatalf("%v (regenerate with -update)", err)
			}
			defer f.Close()
			got, words, err := decodeAll(f)
			if err != nil {
				t.Fatalf("Decode(%s): %v", path, err)
			}
			if d := diffHeader(got, want); d != "" {
				t.Errorf("golden header changed:\n%s", d)
			}
			if !slices.Equal(words, goldenWords(h)) {
				t.Error("golden data changed")
			}

			onDisk, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}

			// Spot-check the values a reader relies on, independent of the
			// helpers above.
			if got.Version != tc.version || got.Generations != 3 || got.Interval != 10*time.Minute ||
				got.Seed != 0x0123456789abcdef || got.K != 10 || got.Epoch != 1234 || got.Rotations != 1200 ||
				got.Gens[1].Number != 1233 || !got.Origin.Equal(goldenHeader().Origin) ||
				got.Gens[0].Slot != 3 || got.Gens[2].Start.Unix() != 1763719200 ||
				got.Topic != "orders" || got.Partition != 3 || got.InputOffsets[3] != 98765 {
				t.Errorf("unexpected golden header %+v", got)
			}

			// The byte offsets documented on Decoder.
			le := binary.LittleEndian
			H := int(le.Uint32(onDisk[10:]))
			if string(onDisk[:8]) != Magic || le.Uint16(onDisk[8:]) != tc.version ||
				le.Uint32(onDisk[14:]) != 3 || le.Uint64(onDisk[14+4:]) != uint64(10*time.Minute) ||
				le.Uint64(onDisk[14+28:]) != 0x0123456789abcdef || le.Uint32(onDisk[14+36:]) != 10 ||
				le.Uint32(onDisk[14+40:]) != 512 || le.Uint64(onDisk[14+44:]) != 2 ||
				le.Uint32(onDisk[14+52:]) != 4 || le.Uint64(onDisk[14+56:]) != h.Words ||
				le.Uint64(onDisk[14+72:]) != 1234 || le.Uint64(onDisk[14+80:]) != 1200 ||
				string(onDisk[14+98:14+107]) != ScopePartition ||
				le.Uint32(onDisk[14+H:]) != crc32.Checksum(onDisk[:14+H], castagnoli) ||
				le.Uint64(onDisk[18+H:]) != h.Words || len(onDisk) != 30+H+8*int(h.Words) ||
				le.Uint32(onDisk[26+H+8*int(h.Words):]) != crc32.Checksum(onDisk[:26+H+8*int(h.Words)], castagnoli) {
				t.Error("golden file does not match the layout documented on Decoder")
			}
			// v3 ends the header body with the sector count and the slot use table.
			if tail := onDisk[14+H-4-8*4 : 14+H]; tc.version == VersionV3 &&
				(le.Uint32(tail) != 2 || le.Uint64(tail[4:]) != 309 || le.Uint64(tail[4+8*3:]) != 310) {
				t.Error("golden v3 file does not end its header with the sectors and slot uses documented on Decoder")
			}
			// v4 ends it with the shard bits, the fill table and the stage table.
			if tail := onDisk[14+H-(4+4+8*8+4+36+16) : 14+H]; tc.version == VersionV4 &&
				(le.Uint32(tail) != 1 || le.Uint32(tail[4:]) != 8 || le.Uint64(tail[8:]) != 100 ||
					le.Uint32(tail[72:]) != 1 || le.Uint64(tail[76:]) != 1234 || le.Uint32(tail[84:]) != 1 ||
					le.Uint64(tail[104:]) != 8 || le.Uint64(tail[112:]) != 51) {
				t.Error("golden v4 file does not end its header with the stage tables documented on Decoder")
			}
			// v5 adds the stage's first-word bits after its K, and ends with the header's.
			if tail := onDisk[14+H-(4+4+8*8+4+40+16+4) : 14+H]; tc.version == VersionV5 &&
				(le.Uint32(tail) != 1 || le.Uint32(tail[72:]) != 1 || le.Uint64(tail[76:]) != 1234 ||
					le.Uint32(tail[96:]) != 9 || le.Uint32(tail[100:]) != 9 || le.Uint32(tail[104:]) != 1 ||
					le.Uint64(tail[108:]) != 8 || le.Uint64(tail[116:]) != 51 || le.Uint32(tail[132:]) != 4) {
				t.Error("golden v5 file does not end its header with the stage table and first-word bits documented on Decoder")
			}

			// The encoder must still produce the exact same bytes: a diff
			// here is a format change and needs a new version number.
			if re := encodeBytes(t, h, tc.version, goldenWords(h)); !bytes.Equal(re, onDisk) {
				t.Error("encoding the golden header no longer reproduces the golden file: bump the format version")
			}
		})
	}
}
