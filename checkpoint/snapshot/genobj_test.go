package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kdedup/kdedup/internal/tier"
)

// genWords returns n words with about density of their 63 data bits set, in clusters of
// cluster bits in blocks of 24 words (as a key sets its bits in one block), from seed.
func genWords(n int, density float64, seed uint64) []uint64 {
	r := rand.New(rand.NewPCG(seed, 1))
	words := make([]uint64, n)
	if density >= 1 { // a full filter: about half of every word's data bits
		for i := range words {
			words[i] = r.Uint64() >> 1
		}
		return words
	}
	bitsWanted := int(density * float64(n) * 63)
	for set := 0; set < bitsWanted; {
		block := r.IntN(max(n/24, 1)) * 24
		for range 21 {
			w := min(block+r.IntN(24), n-1)
			words[w] |= 1 << r.IntN(63)
			set++
		}
	}
	return words
}

// encodeGen encodes words as a generation object with the given section sizes, passing them to
// WriteWords in pieces of step words.
func encodeGen(t testing.TB, gen uint64, sections []uint64, words []uint64, step int) []byte {
	t.Helper()
	var b bytes.Buffer
	e, err := NewGenEncoder(&b, GenHeader{Generation: gen, Sections: sections})
	if err != nil {
		t.Fatal(err)
	}
	for rest := words; len(rest) > 0; {
		n := min(step, len(rest))
		if err := e.WriteWords(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if e.Size() != int64(b.Len()) {
		t.Fatalf("Size %d, wrote %d", e.Size(), b.Len())
	}
	return b.Bytes()
}

// decodeGen decodes a whole generation object, reading it in pieces of step words.
func decodeGen(b []byte, size int64, step int) (GenHeader, []uint64, uint32, error) {
	d := NewGenDecoder(bytes.NewReader(b), size)
	h, err := d.Header()
	if err != nil {
		return h, nil, 0, err
	}
	words := make([]uint64, h.Words())
	for rest := words; len(rest) > 0; {
		n := min(step, len(rest))
		if err := d.ReadWords(rest[:n]); err != nil {
			return h, nil, 0, err
		}
		rest = rest[n:]
	}
	return h, words, d.Checksum(), d.Verify()
}

func TestGenRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		sections []uint64
		density  float64
	}{
		{"empty", []uint64{5000}, 0},
		{"one key", []uint64{12000}, 21.0 / (12000 * 63)},
		{"sparse", []uint64{20000}, 0.001},
		{"medium", []uint64{20000}, 0.1},
		{"half", []uint64{20000}, 0.4},
		{"full", []uint64{20000}, 1},
		{"stages", []uint64{4096, 700, 1, 513}, 0.05},
		{"short section", []uint64{3}, 0.2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var total uint64
			for _, s := range tc.sections {
				total += s
			}
			words := genWords(int(total), tc.density, 7)
			var first []byte
			for _, step := range []int{1, 37, ChunkWords, 4096, int(total)} {
				b := encodeGen(t, 42, tc.sections, words, step)
				if first == nil {
					first = b
				} else if !bytes.Equal(b, first) {
					t.Fatalf("step %d: encoding depends on how the words were passed", step)
				}
				for _, size := range []int64{int64(len(b)), -1} {
					h, got, _, err := decodeGen(b, size, step)
					if err != nil {
						t.Fatalf("step %d size %d: %v", step, size, err)
					}
					if h.Generation != 42 || !slices.Equal(h.Sections, tc.sections) || !slices.Equal(got, words) {
						t.Fatalf("step %d: decoded %+v and different words", step, h)
					}
				}
			}
			t.Logf("%d words, %d set bits: %d bytes (raw %d)", total, popcount(words), len(first), total*8)
		})
	}
}

func popcount(words []uint64) int {
	n := 0
	for _, w := range words {
		n += bits.OnesCount64(w)
	}
	return n
}

// TestGenSizeFollowsKeys checks the point of the encoding: an empty generation costs a few
// bytes, a sparse one about 10 bits per set bit, and a full one no more than its raw words.
func TestGenSizeFollowsKeys(t *testing.T) {
	const n = 200000
	for _, tc := range []struct {
		density     float64
		maxBitsEach float64 // bytes×8 per set bit
		maxRaw      float64 // bytes / raw bytes
	}{
		{0, 0, 0.0001},
		{0.001, 11, 0.1},
		{0.05, 8, 0.5},
		{0.15, 5, 0.75},
		{1, 1e9, 1.001},
	} {
		words := genWords(n, tc.density, 3)
		b := encodeGen(t, 1, []uint64{n}, words, 4096)
		ones := popcount(words)
		ratio := float64(len(b)) / float64(n*8)
		t.Logf("density %v: %d set bits, %d bytes, %.3f of raw", tc.density, ones, len(b), ratio)
		if ratio > tc.maxRaw || ones > 0 && float64(len(b)*8)/float64(ones) > tc.maxBitsEach {
			t.Errorf("density %v: %d bytes for %d set bits of %d words", tc.density, len(b), ones, n)
		}
	}
}

func TestGenEncoderRefuses(t *testing.T) {
	for _, sections := range [][]uint64{nil, {0}, {1, 0}, {MaxDataBytes/8 + 1}} {
		if _, err := NewGenEncoder(io.Discard, GenHeader{Sections: sections}); !errors.Is(err, ErrInvalidHeader) {
			t.Errorf("sections %v: err = %v, want ErrInvalidHeader", sections, err)
		}
	}
	e, err := NewGenEncoder(io.Discard, GenHeader{Sections: []uint64{10}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.WriteWords(make([]uint64, 9)); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err == nil {
		t.Error("Close with a word missing succeeded")
	}
	if err := e.WriteWords(make([]uint64, 2)); err == nil {
		t.Error("WriteWords past the declared words succeeded")
	}
}

// TestGenCorrupt checks that every single-byte change, and every truncation, of an object of each
// chunk mode is an error wrapping one of the sentinels, never a panic or a silent success.
func TestGenCorrupt(t *testing.T) {
	tier.NotUnderRace(t) // decodes on one goroutine; exhaustive, so 10× slower under -race
	words := append(genWords(2*ChunkWords, 0.002, 1), genWords(ChunkWords, 2, 2)...)
	words = append(words, make([]uint64, 3*ChunkWords)...)
	b := encodeGen(t, 9, []uint64{uint64(len(words)) - 100, 100}, words, 1000)
	classify := func(err error) bool {
		return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotSnapshot) || errors.Is(err, ErrUnknownVersion)
	}
	for i := range b {
		for _, x := range []byte{1, 0x80, 0xff} {
			c := bytes.Clone(b)
			c[i] ^= x
			for _, size := range []int64{int64(len(c)), -1} {
				if _, _, _, err := decodeGen(c, size, 700); !classify(err) {
					t.Fatalf("byte %d ^ %#x (size %d): err = %v", i, x, size, err)
				}
			}
		}
	}
	for n := range len(b) {
		for _, size := range []int64{int64(n), -1} {
			if _, _, _, err := decodeGen(b[:n], size, 700); !classify(err) {
				t.Fatalf("truncated to %d (size %d): err = %v", n, size, err)
			}
		}
	}
	if _, _, _, err := decodeGen(append(bytes.Clone(b), 0), -1, 700); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing byte: err = %v", err)
	}
}

func TestGenReaderError(t *testing.T) {
	b := encodeGen(t, 1, []uint64{4000}, genWords(4000, 0.01, 5), 4000)
	boom := errors.New("boom")
	for _, at := range []int{5, 30, len(b) / 2, len(b) - 2} {
		r := io.MultiReader(bytes.NewReader(b[:at]), iotestErrReader{boom})
		d := NewGenDecoder(r, -1)
		err := d.Verify()
		if !errors.Is(err, boom) || errors.Is(err, ErrCorrupt) {
			t.Errorf("error at byte %d: %v, want the reader's error only", at, err)
		}
	}
}

func TestGenChecksumMatchesEncoder(t *testing.T) {
	words := genWords(3000, 0.01, 9)
	var b bytes.Buffer
	e, err := NewGenEncoder(&b, GenHeader{Generation: 3, Sections: []uint64{3000}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.WriteWords(words); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, sum, err := decodeGen(b.Bytes(), int64(b.Len()), 3000)
	if err != nil || sum != e.Checksum() {
		t.Fatalf("decoder checksum %08x, encoder %08x, err %v", sum, e.Checksum(), err)
	}
}

func ExampleNewGenEncoder() {
	words := make([]uint64, 4*ChunkWords)
	words[1000] = 1 << 7
	var b bytes.Buffer
	e, _ := NewGenEncoder(&b, GenHeader{Generation: 12, Sections: []uint64{uint64(len(words))}})
	_ = e.WriteWords(words)
	_ = e.Close()
	fmt.Println(b.Len(), "bytes for", len(words)*8, "bytes of words")
	// Output: 51 bytes for 16384 bytes of words
}

// BenchmarkGenDecode measures decoding a 4.8 MB generation (the default filter's) at several
// loads; raw is the baseline: the same words read from a single-file snapshot.
func BenchmarkGenDecode(b *testing.B) {
	const n = 606864
	for _, tc := range []struct {
		name    string
		density float64
	}{{"empty", 0}, {"sparse", 0.001}, {"medium", 0.05}, {"dense", 0.15}, {"capacity", 0.5}, {"full", 1}} {
		words := genWords(n, tc.density, 1)
		enc := encodeGen(b, 1, []uint64{n}, words, 4096)
		dst := make([]uint64, n)
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(n * 8)
			b.ReportAllocs()
			b.ReportMetric(float64(len(enc)), "object-bytes")
			for b.Loop() {
				d := NewGenDecoder(bytes.NewReader(enc), int64(len(enc)))
				if err := d.ReadWords(dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("raw", func(b *testing.B) {
		h := testHeader(1)
		h.Groups = n / uint64(h.Slots*h.Sectors*h.SectorBits/64)
		h.Words = h.Groups * uint64(h.Slots*h.Sectors*h.SectorBits/64)
		raw := encodeBytes(b, h, SingleFileVersion, genWords(int(h.Words), 1, 1))
		dst := make([]uint64, h.Words)
		b.SetBytes(int64(h.Words) * 8)
		b.ReportAllocs()
		for b.Loop() {
			d := NewDecoder(bytes.NewReader(raw))
			if err := d.ReadWords(dst); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGenEncode(b *testing.B) {
	const n = 606864
	for _, tc := range []struct {
		name    string
		density float64
	}{{"empty", 0}, {"sparse", 0.001}, {"medium", 0.05}, {"dense", 0.15}, {"capacity", 0.5}, {"full", 1}} {
		words := genWords(n, tc.density, 1)
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(n * 8)
			b.ReportAllocs()
			for b.Loop() {
				e, err := NewGenEncoder(io.Discard, GenHeader{Sections: []uint64{n}})
				if err != nil {
					b.Fatal(err)
				}
				if err := e.WriteWords(words); err != nil {
					b.Fatal(err)
				}
				if err := e.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
