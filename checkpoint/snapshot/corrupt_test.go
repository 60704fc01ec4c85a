package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/kdedup/kdedup/internal/ckpttest"

	"github.com/kdedup/kdedup/internal/tier"
)

// smallSnapshots are the inputs of the exhaustive corruption tests: one per
// format version, small enough to damage at every byte.
func smallSnapshots(t testing.TB) map[string][]byte {
	t.Helper()
	h := testHeader(1) // 64 words
	old := h
	oldLayout(&old) // 32 words
	return map[string][]byte{
		"v1": encodeBytes(t, old, VersionV1, ckpttest.Words(old.Words, 7)),
		"v2": encodeBytes(t, old, VersionV2, ckpttest.Words(old.Words, 7)),
		"v3": encodeBytes(t, h, VersionV3, ckpttest.Words(h.Words, 7)),
		"v4": encodeBytes(t, withStages(h), VersionV4, ckpttest.Words(withStages(h).Words, 7)),
		"v5": encodeBytes(t, withStages(h), VersionV5, ckpttest.Words(withStages(h).Words, 7)),
	}
}

// checkRejected decodes in every way the package offers and fails the test
// unless each way reports an error wrapping one of the sentinels.
func checkRejected(t *testing.T, in []byte, what string) {
	t.Helper()
	for _, rk := range readerKinds {
		if _, _, err := decodeAll(rk.wrap(in)); !isFormatErr(err) {
			t.Fatalf("%s, %s: Decode = %v, want a format error", what, rk.name, err)
		}
		d := NewDecoder(rk.wrap(in))
		_, rerr := io.ReadAll(d)
		if verr := d.Verify(); !isFormatErr(verr) || (rerr != nil && !isFormatErr(rerr)) {
			t.Fatalf("%s, %s: Read = %v, Verify = %v, want format errors", what, rk.name, rerr, verr)
		}
		if err := Inspect(io.Discard, rk.wrap(in)); !isFormatErr(err) {
			t.Fatalf("%s, %s: Inspect = %v, want a format error", what, rk.name, err)
		}
	}
}

func TestCorruptEveryByte(t *testing.T) {
	tier.NotUnderRace(t) // decodes on one goroutine; exhaustive, so 10× slower under -race
	for name, good := range smallSnapshots(t) {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			t.Run(fmt.Sprintf("%s/xor%02x", name, mask), func(t *testing.T) {
				for i := range good {
					bad := slices.Clone(good)
					bad[i] ^= mask
					checkRejected(t, bad, fmt.Sprintf("byte %d", i))
				}
			})
		}
	}
}

func TestTruncateEveryLength(t *testing.T) {
	tier.NotUnderRace(t) // decodes on one goroutine; exhaustive, so 10× slower under -race
	for name, good := range smallSnapshots(t) {
		t.Run(name, func(t *testing.T) {
			for n := range len(good) {
				in := good[:n]
				checkRejected(t, in, fmt.Sprintf("length %d", n))
				if _, _, err := decodeAll(bytes.NewReader(in)); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("length %d: %v, want ErrCorrupt (a prefix of a snapshot is truncated, not foreign)", n, err)
				}
			}
		})
	}
}

func TestTrailingBytes(t *testing.T) {
	for name, good := range smallSnapshots(t) {
		for _, extra := range []int{1, 4, 1000} {
			in := append(slices.Clone(good), make([]byte, extra)...)
			for _, rk := range readerKinds {
				if _, _, err := decodeAll(rk.wrap(in)); !errors.Is(err, ErrCorrupt) {
					t.Errorf("%s + %d bytes, %s: Decode = %v, want ErrCorrupt", name, extra, rk.name, err)
				}
			}
		}
	}
}

func TestSentinelClassification(t *testing.T) {
	good := smallSnapshots(t)["v3"]
	patch := func(off int, b ...byte) []byte {
		c := slices.Clone(good)
		copy(c[off:], b)
		return c
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty file", nil, ErrCorrupt},
		{"text file", []byte("hello, world\n"), ErrNotSnapshot},
		{"gzip file", []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3}, ErrNotSnapshot},
		{"wrong magic", patch(0, 'X'), ErrNotSnapshot},
		{"version 0", patch(8, 0, 0), ErrUnknownVersion},
		{"newer version", patch(8, byte(CurrentVersion+1), 0), ErrUnknownVersion},
		{"version 0xffff", patch(8, 0xff, 0xff), ErrUnknownVersion},
		{"v3 relabelled v2", patch(8, 2, 0), ErrCorrupt},
		{"v3 relabelled v1", patch(8, 1, 0), ErrCorrupt},
		{"header length 0", patch(10, 0, 0, 0, 0), ErrCorrupt},
		{"header length huge", patch(10, 0xff, 0xff, 0xff, 0x7f), ErrCorrupt},
		{"bad header byte", patch(20, good[20]^0x10), ErrCorrupt},
		{"bad data byte", patch(len(good)-5, good[len(good)-5]^0x10), ErrCorrupt},
		{"bad file checksum", patch(len(good)-1, good[len(good)-1]^0x10), ErrCorrupt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, rk := range readerKinds {
				if _, _, err := decodeAll(rk.wrap(tc.in)); !errors.Is(err, tc.want) {
					t.Errorf("%s: Decode = %v, want %v", rk.name, err, tc.want)
				}
			}
		})
	}
}

// TestValidChecksumBadHeader covers headers that pass the checksum but
// violate the format (as a buggy writer could produce): all ErrCorrupt.
func TestValidChecksumBadHeader(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Header)
	}{
		{"slot out of range", func(h *Header) { h.Gens[0].Slot = 9 }},
		{"duplicate slot", func(h *Header) { h.Gens[0].Slot = h.Gens[1].Slot }},
		{"unknown scope", func(h *Header) { h.Scope = "x" }},
		{"fpr > 1", func(h *Header) { h.FalsePositiveRate = 2 }},
		{"table longer than generations", func(h *Header) { h.Generations = 2 }},
		{"generations out of order", func(h *Header) { h.Gens[0], h.Gens[1] = h.Gens[1], h.Gens[0] }},
		{"negative offset", func(h *Header) { h.InputOffsets[1] = -5 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := testHeader(1)
			tc.mod(&h)
			in := rawSnapshot(h, SingleFileVersion, make([]byte, h.Words*8))
			for _, rk := range readerKinds {
				if _, _, err := decodeAll(rk.wrap(in)); !errors.Is(err, ErrCorrupt) {
					t.Errorf("%s: Decode = %v, want ErrCorrupt", rk.name, err)
				}
			}
		})
	}
}

// TestReaderErrorsPassThrough checks that an I/O error is reported as such,
// not as corruption (Load treats the two differently).
func TestReaderErrorsPassThrough(t *testing.T) {
	good := smallSnapshots(t)["v3"]
	errIO := errors.New("disk on fire")
	for _, n := range []int{0, 5, 12, 40, len(good) - 100, len(good) - 2} {
		r := io.MultiReader(bytes.NewReader(good[:n]), iotestErrReader{errIO})
		_, _, err := decodeAll(r)
		if !errors.Is(err, errIO) || isFormatErr(err) {
			t.Errorf("error after %d bytes: Decode = %v, want the reader's error only", n, err)
		}
	}
}

type iotestErrReader struct{ err error }

func (e iotestErrReader) Read([]byte) (int, error) { return 0, e.err }
