package snapshottest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/kdedup/kdedup/checkpoint/snapshot"
)

// TestEncodeGolden: Encode writes golden-v5.snap, which kdedup's version 5 encoder wrote, byte
// for byte from what the product's reader decodes of it.
func TestEncodeGolden(t *testing.T) {
	golden, err := os.ReadFile("../testdata/golden-v5.snap")
	if err != nil {
		t.Fatal(err)
	}
	d := snapshot.NewDecoderSize(bytes.NewReader(golden), int64(len(golden)))
	h, err := d.Header()
	if err != nil || h.Version != snapshot.VersionV5 {
		t.Fatalf("golden header: version %d, %v", h.Version, err)
	}
	words := make([]uint64, h.Words)
	if err := ReadWords(d, words); err != nil {
		t.Fatal(err)
	}
	if err := d.Verify(); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Encode(&b, h, func(w io.Writer) error { return WriteWords(w, words) }); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), golden) {
		t.Fatalf("Encode wrote %d bytes that differ from the %d of golden-v5.snap", b.Len(), len(golden))
	}
	for _, tc := range []struct {
		name  string
		words []uint64
	}{{"too few words", words[:len(words)-1]}, {"too many words", append(words, 1)}} {
		if err := Encode(io.Discard, h, func(w io.Writer) error { return WriteWords(w, tc.words) }); err == nil {
			t.Errorf("%s: Encode succeeded", tc.name)
		}
	}
	h.Refs = []snapshot.GenRef{{Object: "x"}}
	if err := Encode(io.Discard, h, func(io.Writer) error { return nil }); !errors.Is(err, snapshot.ErrInvalidHeader) {
		t.Errorf("Encode with references = %v, want ErrInvalidHeader", err)
	}
}
