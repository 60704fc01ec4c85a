package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"testing/iotest"
	"time"

	"github.com/kdedup/kdedup/internal/ckpttest"
)

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		groups  uint64
		version uint16
		mod     func(*Header)
	}{
		{name: "small v3", groups: 2, version: SingleFileVersion},
		{name: "multi-MiB v3", groups: 10_000, version: SingleFileVersion}, // 640,000 words, 5 MiB
		{name: "small v2", groups: 2, version: VersionV2, mod: oldLayout},
		{name: "small v1", groups: 2, version: VersionV1, mod: oldLayout},
		{name: "one sector", groups: 2, version: SingleFileVersion, mod: func(h *Header) {
			h.Sectors, h.Words, h.FirstBits = 1, h.Groups*4*8, h.K
		}},
		{name: "global scope, no offsets", groups: 3, version: SingleFileVersion, mod: func(h *Header) {
			h.Scope, h.Partition, h.Topic = ScopeGlobal, -1, ""
			h.InputOffsets, h.OutputOffsets = nil, nil
		}},
		{name: "zero times", groups: 1, version: SingleFileVersion, mod: func(h *Header) {
			h.Created, h.Origin = time.Time{}, time.Time{}
			h.Gens[1].Start = time.Time{}
		}},
		{name: "fresh filter: one live generation", groups: 2, version: SingleFileVersion, mod: func(h *Header) {
			h.Gens = h.Gens[:1]
			h.Epoch, h.Rotations, h.Gens[0].Number = 0, 0, 0
		}},
		{name: "no live generation", groups: 2, version: SingleFileVersion, mod: func(h *Header) { h.Gens = nil }},
		{name: "many partitions, one generation, extreme values", groups: 1, version: SingleFileVersion, mod: func(h *Header) {
			h.Generations, h.Slots, h.Words, h.SlotUses = 1, 1, 16, []uint64{math.MaxUint64}
			h.Gens = []Generation{{Number: math.MaxUint64, Start: time.Unix(0, math.MaxInt64), Slot: 0}}
			h.Origin = time.Unix(0, math.MinInt64)
			h.Rotations = math.MaxUint64
			h.Seed, h.Epoch, h.K, h.FalsePositiveRate = math.MaxUint64, math.MaxUint64, MaxK, math.SmallestNonzeroFloat64
			h.Scope, h.Partition = ScopeGlobal, -1
			h.InputOffsets = map[int32]int64{}
			for p := int32(0); p < 1000; p++ {
				h.InputOffsets[p*7] = int64(p) << 40
			}
			h.OutputOffsets = map[int32]int64{math.MaxInt32: math.MaxInt64}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := testHeader(tc.groups)
			if tc.mod != nil {
				tc.mod(&h)
			}
			words := ckpttest.Words(h.Words, 1)
			b := encodeBytes(t, h, tc.version, words)
			if want := 14 + len(appendBody(nil, &h, tc.version)) + 4 + 8 + 8*len(words) + 4; len(b) != want {
				t.Fatalf("encoded %d bytes, layout says %d", len(b), want)
			}
			want := asDecoded(h, tc.version)
			for _, rk := range readerKinds {
				got, gotWords, err := decodeAll(rk.wrap(b))
				if err != nil {
					t.Fatalf("%s: Decode: %v", rk.name, err)
				}
				if d := diffHeader(got, want); d != "" {
					t.Errorf("%s: header mismatch\n%s", rk.name, d)
				}
				if !slices.Equal(gotWords, words) {
					t.Errorf("%s: words differ", rk.name)
				}

				// The io.Reader path, with small irregular reads.
				d := NewDecoder(rk.wrap(b))
				if _, err := d.Header(); err != nil {
					t.Fatal(err)
				}
				data, err := io.ReadAll(iotest.OneByteReader(io.LimitReader(d, 1000)))
				if err != nil {
					t.Fatal(err)
				}
				rest, err := io.ReadAll(d)
				if err != nil {
					t.Fatalf("%s: reading data through Read: %v", rk.name, err)
				}
				data = append(data, rest...)
				var wb bytes.Buffer
				_ = WriteWords(&wb, words)
				if !bytes.Equal(data, wb.Bytes()) {
					t.Errorf("%s: Read returned different data", rk.name)
				}
				if err := d.Verify(); err != nil {
					t.Errorf("%s: Verify after full read: %v", rk.name, err)
				}

				hdr, err := DecodeHeader(rk.wrap(b))
				if err != nil {
					t.Fatalf("%s: DecodeHeader: %v", rk.name, err)
				}
				if d := diffHeader(hdr, want); d != "" {
					t.Errorf("%s: DecodeHeader mismatch\n%s", rk.name, d)
				}
			}
		})
	}
}

func TestReadWordsInPieces(t *testing.T) {
	h := testHeader(2500) // 160,000 words: several chunks
	words := ckpttest.Words(h.Words, 2)
	b := encodeBytes(t, h, SingleFileVersion, words)
	d := NewDecoder(bytes.NewReader(b))
	got := make([]uint64, h.Words)
	for _, part := range [][2]int{{0, 1}, {1, 100_000}, {100_000, 159_999}, {159_999, 160_000}} {
		if err := d.ReadWords(got[part[0]:part[1]]); err != nil {
			t.Fatalf("ReadWords%v: %v", part, err)
		}
	}
	if !slices.Equal(got, words) {
		t.Fatal("words differ")
	}
	if err := d.ReadWords(make([]uint64, 1)); err == nil {
		t.Fatal("ReadWords past the end succeeded")
	}
	if err := d.Verify(); err != nil {
		t.Fatal(err)
	}
}

func TestEncodeInvalidHeader(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Header)
	}{
		{"zero generations", func(h *Header) { h.Generations = 0 }},
		{"too many generations", func(h *Header) { h.Generations = MaxGenerations + 1 }},
		{"zero interval", func(h *Header) { h.Interval = 0 }},
		{"zero capacity", func(h *Header) { h.Capacity = 0 }},
		{"fpr 0", func(h *Header) { h.FalsePositiveRate = 0 }},
		{"fpr 1", func(h *Header) { h.FalsePositiveRate = 1 }},
		{"fpr NaN", func(h *Header) { h.FalsePositiveRate = math.NaN() }},
		{"k 0", func(h *Header) { h.K = 0 }},
		{"k too big", func(h *Header) { h.K = MaxK + 1 }},
		{"block bits not multiple of 64", func(h *Header) { h.SectorBits = 100 }},
		{"zero groups", func(h *Header) { h.Groups = 0; h.Words = 0 }},
		{"slots < generations", func(h *Header) { h.Slots = 2 }},
		{"words mismatch", func(h *Header) { h.Words++ }},
		{"data too large", func(h *Header) { h.Groups = MaxDataBytes; h.Words = h.Groups * 32 }},
		{"table longer than generations", func(h *Header) { h.Generations = 2 }},
		{"number above epoch", func(h *Header) { h.Epoch = 41 }},
		{"numbers not newest first", func(h *Header) { h.Gens[1].Number, h.Gens[2].Number = 40, 41 }},
		{"number twice", func(h *Header) { h.Gens[2].Number = h.Gens[1].Number }},
		{"origin not representable", func(h *Header) { h.Origin = time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{"slot out of range", func(h *Header) { h.Gens[0].Slot = 4 }},
		{"slot negative", func(h *Header) { h.Gens[0].Slot = -1 }},
		{"slot twice", func(h *Header) { h.Gens[0].Slot = h.Gens[1].Slot }},
		{"start not representable", func(h *Header) { h.Gens[0].Start = time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{"unknown scope", func(h *Header) { h.Scope = "cluster" }},
		{"partition scope with -1", func(h *Header) { h.Partition = -1 }},
		{"global scope with partition", func(h *Header) { h.Scope = ScopeGlobal }},
		{"topic too long", func(h *Header) { h.Topic = string(make([]byte, MaxTopicLen+1)) }},
		{"negative input partition", func(h *Header) { h.InputOffsets[-1] = 5 }},
		{"negative output offset", func(h *Header) { h.OutputOffsets[2] = -1 }},
		{"created not representable", func(h *Header) { h.Created = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := testHeader(1)
			tc.mod(&h)
			var buf bytes.Buffer
			called := false
			err := Encode(&buf, h, func(w io.Writer) error { called = true; return nil })
			if !errors.Is(err, ErrInvalidHeader) {
				t.Fatalf("Encode = %v, want ErrInvalidHeader", err)
			}
			if buf.Len() != 0 || called {
				t.Fatalf("Encode wrote %d bytes / called data=%v for an invalid header", buf.Len(), called)
			}
		})
	}
}

func TestEncodeDataFunction(t *testing.T) {
	errBoom := errors.New("boom")
	h := testHeader(1)
	words := ckpttest.Words(h.Words, 3)
	tests := []struct {
		name    string
		data    func(io.Writer) error
		wantErr error // nil: any error
	}{
		{"too few bytes", func(w io.Writer) error { return WriteWords(w, words[:len(words)-1]) }, nil},
		{"too many bytes", func(w io.Writer) error { return WriteWords(w, append(slices.Clone(words), 1)) }, nil},
		{"too many bytes, error ignored", func(w io.Writer) error { _ = WriteWords(w, append(slices.Clone(words), 1)); return nil }, nil},
		{"error", func(w io.Writer) error { return errBoom }, errBoom},
		{"nil function", nil, ErrInvalidHeader},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Encode(io.Discard, h, tc.data)
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("Encode = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

func TestEncodeWriterError(t *testing.T) {
	h := testHeader(500) // 256,000 data bytes
	words := ckpttest.Words(h.Words, 3)
	for _, limit := range []int64{0, 10, 100, 70_000, int64(h.Words*8) + 20} {
		w := &limitWriter{n: limit}
		err := Encode(w, h, func(w io.Writer) error { return WriteWords(w, words) })
		if !errors.Is(err, errLimit) {
			t.Errorf("limit %d: Encode = %v, want errLimit", limit, err)
		}
	}
}

var errLimit = errors.New("write limit reached")

type limitWriter struct{ n int64 }

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		n := l.n
		l.n = 0
		return int(n), errLimit
	}
	l.n -= int64(len(p))
	return len(p), nil
}

// failAfter returns the bytes of b, then fails: proof that the decoder did
// not read past them.
type failAfter struct{ r io.Reader }

var errReadPastHeader = errors.New("read past the header")

func (f *failAfter) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, errReadPastHeader
	}
	return n, err
}

func TestDecodeHeaderReadsOnlyTheHeader(t *testing.T) {
	h := testHeader(1000)
	b := encodeBytes(t, h, SingleFileVersion, ckpttest.Words(h.Words, 4))
	hdrLen := 14 + len(appendBody(nil, &h, SingleFileVersion)) + 4 + 8
	got, err := DecodeHeader(&failAfter{bytes.NewReader(b[:hdrLen])})
	if err != nil {
		t.Fatalf("DecodeHeader: %v", err)
	}
	if d := diffHeader(got, func() Header { h.Version = SingleFileVersion; return h }()); d != "" {
		t.Fatal(d)
	}
}

func TestDecodeDestination(t *testing.T) {
	h := testHeader(2)
	words := ckpttest.Words(h.Words, 5)
	good := encodeBytes(t, h, SingleFileVersion, words)
	bad := slices.Clone(good)
	bad[len(bad)-20] ^= 1 // a data byte
	errDst := errors.New("no memory for you")
	tests := []struct {
		name    string
		in      []byte
		dst     func(Header) ([]uint64, error)
		wantErr error // nil: success
		anyErr  bool
	}{
		{"error from dst", good, func(Header) ([]uint64, error) { return nil, errDst }, errDst, true},
		{"short destination", good, func(h Header) ([]uint64, error) { return make([]uint64, h.Words-1), nil }, nil, true},
		{"nil destination verifies", good, func(Header) ([]uint64, error) { return nil, nil }, nil, false},
		{"nil destination detects corruption", bad, func(Header) ([]uint64, error) { return nil, nil }, ErrCorrupt, true},
		{"corrupt data", bad, func(h Header) ([]uint64, error) { return make([]uint64, h.Words), nil }, ErrCorrupt, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(bytes.NewReader(tc.in), tc.dst)
			switch {
			case !tc.anyErr && err != nil:
				t.Fatalf("Decode = %v, want success", err)
			case tc.anyErr && err == nil:
				t.Fatal("Decode succeeded, want an error")
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("Decode = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// TestImpossibleLengths feeds headers with correct checksums but lengths
// that cannot be right: the decoder must refuse them before the caller
// allocates, and without allocating much itself.
func TestImpossibleLengths(t *testing.T) {
	huge := testHeader(1 << 21) // 1 GiB of data claimed
	tooBig := testHeader(1)
	tooBig.Groups, tooBig.Words = MaxDataBytes/256, MaxDataBytes/8*2 // inconsistent and over the limit
	badCount := testHeader(1)
	badCount.Words = 8                                     // header says 32
	hugeBody := []byte(Magic + "\x02\x00\x00\x00\x00\x01") // claims a 16 MiB header body, has none
	tests := []struct {
		name  string
		in    []byte
		kinds []string // reader kinds where dst must not be called
	}{
		{"1 GiB claimed, 256 bytes present", rawSnapshot(huge, SingleFileVersion, make([]byte, 256)), []string{"seekable"}},
		{"over MaxDataBytes", rawSnapshot(tooBig, SingleFileVersion, nil), []string{"seekable", "stream"}},
		{"words inconsistent", rawSnapshot(badCount, SingleFileVersion, make([]byte, 64)), []string{"seekable", "stream"}},
		{"16 MiB header body claimed", hugeBody, []string{"seekable", "stream"}},
	}
	for _, tc := range tests {
		for _, rk := range readerKinds {
			t.Run(tc.name+"/"+rk.name, func(t *testing.T) {
				mustNotAlloc := slices.Contains(tc.kinds, rk.name)
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				_, err := Decode(rk.wrap(tc.in), func(h Header) ([]uint64, error) {
					if mustNotAlloc {
						t.Errorf("dst called for an impossible header (words %d)", h.Words)
					}
					return nil, nil // verify only: never allocates
				})
				runtime.ReadMemStats(&ms1)
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Decode = %v, want ErrCorrupt", err)
				}
				if alloc := ms1.TotalAlloc - ms0.TotalAlloc; alloc > 4<<20 {
					t.Errorf("decoder allocated %d bytes for a %d-byte input", alloc, len(tc.in))
				}
			})
		}
	}
}

// TestWordPaths runs the word encoding both ways: the bulk-copy path used
// on little-endian hosts and the portable conversion used elsewhere, which
// this host would otherwise never execute.
func TestWordPaths(t *testing.T) {
	saved := nativeLittleEndian
	t.Cleanup(func() { nativeLittleEndian = saved })
	for _, native := range []bool{true, false} {
		nativeLittleEndian = native && saved
		t.Run(map[bool]string{true: "bulk-copy", false: "portable"}[native], func(t *testing.T) {
			for _, n := range []int{0, 1, 3, 4, 5, 9, wordChunk - 1, wordChunk, wordChunk + 5, 3*wordChunk + 7} {
				words := ckpttest.Words(uint64(n), uint64(n))
				var got bytes.Buffer
				if err := WriteWords(&got, words); err != nil {
					t.Fatal(err)
				}
				want := make([]byte, 0, 8*n)
				for _, w := range words {
					want = binary.LittleEndian.AppendUint64(want, w)
				}
				if !bytes.Equal(got.Bytes(), want) {
					t.Fatalf("WriteWords(%d words) differs from the reference encoding", n)
				}
				back := make([]uint64, n)
				getWords(back, want)
				if !slices.Equal(back, words) {
					t.Fatalf("getWords(%d words) differs", n)
				}
			}
			h := testHeader(2500) // 160,000 words: several chunks
			words := ckpttest.Words(h.Words, 9)
			b := encodeBytes(t, h, SingleFileVersion, words)
			for _, rk := range readerKinds {
				d := NewDecoder(rk.wrap(b))
				got := make([]uint64, h.Words)
				for _, cut := range [][2]int{{0, 3}, {3, 40_001}, {40_001, 160_000}} {
					if err := d.ReadWords(got[cut[0]:cut[1]]); err != nil {
						t.Fatalf("%s: ReadWords%v: %v", rk.name, cut, err)
					}
				}
				if !slices.Equal(got, words) {
					t.Fatalf("%s: words differ", rk.name)
				}
				bad := slices.Clone(b)
				bad[len(bad)-100] ^= 2
				if _, _, err := decodeAll(rk.wrap(bad)); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%s: corrupt data: %v", rk.name, err)
				}
			}
		})
	}
}

// TestSpecMatchesCurrentVersion keeps the format's one specification, the layout documented on
// Decoder, and the package documentation at the version EncodeManifest writes.
func TestSpecMatchesCurrentVersion(t *testing.T) {
	for _, tc := range []struct{ file, pattern string }{
		{"decode.go", `The byte layout of a version (\d+)\s+// snapshot, the CurrentVersion`},
		{"decode.go", `format version \(uint16\) = (\d+)`},
		{"doc.go", `EncodeManifest writes CurrentVersion, version\s+// (\d+)`},
	} {
		src, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(tc.pattern).FindSubmatch(src)
		if m == nil {
			t.Errorf("%s does not say %q", tc.file, tc.pattern)
			continue
		}
		if v, _ := strconv.Atoi(string(m[1])); v != int(CurrentVersion) {
			t.Errorf("%s documents version %d, CurrentVersion is %d", tc.file, v, CurrentVersion)
		}
	}
}
