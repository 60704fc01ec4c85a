package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"
)

// withStages returns h as version 4 writes a grown filter: two shards, a
// fill table, and one grown stage of the newest generation (8 more words).
func withStages(h Header) Header {
	h.ShardBits = 1
	h.Fill = make([]uint64, h.Slots*2)
	for i := range h.Fill {
		h.Fill[i] = uint64(100 + i)
	}
	h.Stages = []Stage{{Generation: h.Gens[0].Number, Index: 1, Groups: 1, K: 9, FirstBits: 9, Sectors: 1, Words: uint64(h.SectorBits / 64), Counts: []uint64{51, 49}}}
	h.Words += uint64(h.SectorBits / 64)
	return h
}

// asDecoded returns h as a decoder of the given version returns it: without
// the fields that version does not hold.
func asDecoded(h Header, version uint16) Header {
	h.Version = version
	if version >= VersionV7 && h.SeedPrint == 0 {
		h.SeedPrint, h.Seed = SeedPrintOf(h.Seed), 0
	}
	if version < VersionV2 {
		h.OutputOffsets = nil
	}
	if version < VersionV5 {
		h.FirstBits = 0
		h.Stages = slices.Clone(h.Stages)
		for i := range h.Stages {
			h.Stages[i].FirstBits = 0
		}
	}
	return h
}

// testHeader returns a valid current-version header with the given number
// of groups (3 generations in 4 slots of two 512-bit sectors: 64 words per
// group).
func testHeader(groups uint64) Header {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return Header{
		Generations:       3,
		Interval:          time.Minute,
		Capacity:          100_000,
		FalsePositiveRate: 0.001,
		Seed:              0x9e3779b97f4a7c15,
		K:                 7,
		FirstBits:         3,
		SectorBits:        512,
		Sectors:           2,
		Groups:            groups,
		Slots:             4,
		SlotUses:          []uint64{7, 7, 6, 6},
		Words:             groups * 4 * 2 * 8,
		Origin:            base.Add(-40 * time.Minute),
		Epoch:             42,
		Rotations:         41,
		Gens: []Generation{
			{Number: 42, Start: base.Add(2 * time.Minute), Slot: 2},
			{Number: 41, Start: base.Add(time.Minute), Slot: 1},
			{Number: 40, Start: base, Slot: 0},
		},
		Scope:         ScopePartition,
		Topic:         "orders",
		Partition:     3,
		InputOffsets:  map[int32]int64{3: 123456},
		OutputOffsets: map[int32]int64{0: 1000, 1: 2000, 7: 3},
		Created:       base.Add(2*time.Minute + 30*time.Second + 123456789),
	}
}

// oldLayout turns a header into one that versions 1 and 2 can hold: one
// sector per block and no slot use table.
func oldLayout(h *Header) {
	h.Sectors, h.SlotUses, h.FirstBits = 1, nil, 0
	h.Words = h.Groups * uint64(h.Slots) * uint64(h.SectorBits/64)
}

// encodeBytes encodes h and words in the given version.
func encodeBytes(t testing.TB, h Header, version uint16, words []uint64) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := encode(&buf, &h, version, func(w io.Writer) error { return WriteWords(w, words) }); err != nil {
		t.Fatalf("encode: %v", err)
	}
	return buf.Bytes()
}

// rawSnapshot builds snapshot bytes without validating h, with correct
// checksums, so tests can feed the decoder well-formed but impossible
// headers. dataBytes is appended as the data section after the word count
// h.Words.
func rawSnapshot(h Header, version uint16, data []byte) []byte {
	b := []byte(Magic)
	b = binary.LittleEndian.AppendUint16(b, version)
	body := appendBody(nil, &h, version)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
	b = append(b, body...)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	b = binary.LittleEndian.AppendUint64(b, h.Words)
	b = append(b, data...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// streamOnly hides every method but Read, so the decoder cannot learn the
// size of the input.
type streamOnly struct{ r io.Reader }

func (s streamOnly) Read(p []byte) (int, error) { return s.r.Read(p) }

// readerKinds are the two ways the decoder can see its input.
var readerKinds = []struct {
	name string
	wrap func([]byte) io.Reader
}{
	{"seekable", func(b []byte) io.Reader { return bytes.NewReader(b) }},
	{"stream", func(b []byte) io.Reader { return streamOnly{bytes.NewReader(b)} }},
}

// isFormatErr reports whether err wraps one of the decoder's sentinels.
func isFormatErr(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotSnapshot) || errors.Is(err, ErrUnknownVersion)
}

// normalize makes decoded and hand-built headers comparable: times in UTC
// at nanosecond resolution, empty maps as nil.
func normalize(h Header) Header {
	norm := func(t time.Time) time.Time {
		if t.IsZero() {
			return time.Time{}
		}
		return time.Unix(0, t.UnixNano()).UTC()
	}
	h.Created = norm(h.Created)
	h.Origin = norm(h.Origin)
	gens := make([]Generation, len(h.Gens))
	for i, g := range h.Gens {
		gens[i] = Generation{Number: g.Number, Start: norm(g.Start), Slot: g.Slot}
	}
	h.Gens = gens
	nm := func(m map[int32]int64) map[int32]int64 {
		if len(m) == 0 {
			return nil
		}
		return maps.Clone(m)
	}
	h.InputOffsets = nm(h.InputOffsets)
	h.OutputOffsets = nm(h.OutputOffsets)
	return h
}

// diffHeader returns "" if got equals want after normalization.
func diffHeader(got, want Header) string {
	g, w := normalize(got), normalize(want)
	if reflect.DeepEqual(g, w) {
		return ""
	}
	return fmt.Sprintf("got  %+v\nwant %+v", g, w)
}

// decodeAll decodes b fully, refusing absurd destinations.
func decodeAll(r io.Reader) (Header, []uint64, error) {
	var words []uint64
	h, err := Decode(r, func(h Header) ([]uint64, error) {
		if h.DataBytes() > 8<<24 {
			return nil, fmt.Errorf("test refuses %d words", h.DataBytes()/8)
		}
		words = make([]uint64, h.DataBytes()/8)
		return words, nil
	})
	return h, words, err
}
