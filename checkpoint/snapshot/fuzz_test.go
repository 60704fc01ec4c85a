package snapshot

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to every decoding entry point. None may
// panic; a successful decode must be canonical (re-encoding reproduces the
// input exactly, so no damaged input can decode to different values); and
// the destination is only ever requested for sizes the input can hold.
//
//	go test ./checkpoint/snapshot -run '^$' -fuzz FuzzDecode -fuzztime 60s
func FuzzDecode(f *testing.F) {
	snaps := smallSnapshots(f)
	for _, name := range []string{"v1", "v2", "v3", "v4", "v5"} {
		b := snaps[name]
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	m := encodeManifest(f, withRefs(withStages(testHeader(1))))
	f.Add(m)
	f.Add(m[:len(m)-7])
	sh := withRefs(withStages(testHeader(1)))
	for i := range sh.Refs {
		sh.Refs[i].SHA256[i] = 1
	}
	var signed bytes.Buffer
	if err := EncodeSignedManifest(&signed, sh, make([]byte, MinSigningKey)); err != nil {
		f.Fatal(err)
	}
	f.Add(signed.Bytes())
	for _, name := range []string{"golden-v1.snap", "golden-v2.snap", "golden-v3.snap", "golden-v4.snap", "golden-v5.snap", "golden-v6.snap", "golden-v7.snap"} {
		if b, err := os.ReadFile(filepath.Join("testdata", name)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(nil))
	f.Add([]byte(Magic))
	f.Add([]byte(Magic + "\x02\x00\xff\xff\xff\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, rk := range readerKinds {
			var words []uint64
			h, err := Decode(rk.wrap(in), func(h Header) ([]uint64, error) {
				if rk.name == "seekable" && h.DataBytes() > uint64(len(in)) {
					t.Fatalf("destination of %d bytes requested for a %d-byte input", h.DataBytes(), len(in))
				}
				if h.DataBytes() > 64<<20 {
					return nil, nil // stream: cannot know; verify without allocating
				}
				words = make([]uint64, h.DataBytes()/8)
				return words, nil
			})
			if err == nil && words != nil {
				var buf bytes.Buffer
				if err := encode(&buf, &h, h.Version, func(w io.Writer) error { return WriteWords(w, words) }); err != nil {
					t.Fatalf("re-encoding a decoded snapshot: %v", err)
				}
				if !bytes.Equal(buf.Bytes(), in) {
					t.Fatalf("decoded snapshot is not canonical")
				}
			}
			if err != nil && !isFormatErr(err) {
				t.Fatalf("%s: non-format error from a bytes reader: %v", rk.name, err)
			}
			_, _ = DecodeHeader(rk.wrap(in))
			_ = Inspect(io.Discard, rk.wrap(in))
		}
	})
}

// FuzzHeaderBody fuzzes the header-body parser directly, past the checksum
// that stops almost every FuzzDecode mutation: no panic, and whatever parses
// must re-encode to the same bytes.
//
//	go test ./checkpoint/snapshot -run '^$' -fuzz FuzzHeaderBody -fuzztime 30s
func FuzzHeaderBody(f *testing.F) {
	h := testHeader(1)
	f.Add(appendBody(nil, &h, VersionV3), VersionV3)
	h4 := withStages(h)
	f.Add(appendBody(nil, &h4, VersionV4), VersionV4)
	f.Add(appendBody(nil, &h4, VersionV5), VersionV5)
	oldLayout(&h)
	for _, v := range []uint16{VersionV1, VersionV2} {
		f.Add(appendBody(nil, &h, v), v)
	}
	g := goldenHeader()
	f.Add(appendBody(nil, &g, VersionV2), VersionV2)
	g3 := goldenHeaderV3()
	f.Add(appendBody(nil, &g3, VersionV3), VersionV3)
	m := withRefs(h4)
	f.Add(appendBody(nil, &m, VersionV6), VersionV6)
	f.Add(appendBody(nil, &m, VersionV7), VersionV7)
	g5 := goldenHeaderV5()
	f.Add(appendBody(nil, &g5, VersionV5), VersionV5)
	f.Fuzz(func(t *testing.T, body []byte, version uint16) {
		if !knownVersion(version) {
			return
		}
		h, err := parseBody(body, version)
		if err != nil {
			return
		}
		if re := appendBody(nil, &h, version); !bytes.Equal(re, body) {
			t.Fatalf("parsed header re-encodes differently:\n in  %x\n out %x", body, re)
		}
	})
}

// FuzzGenDecode feeds arbitrary bytes to the generation object decoder: no panic, no more words
// than the header declares, and what decodes re-encodes to an object that decodes to the same
// header and words (the encoding is not canonical: a chunk may be stored raw or Rice-coded, but
// the checksum covers the decoded words, so no damaged object decodes to other words).
//
//	go test ./checkpoint/snapshot -run '^$' -fuzz FuzzGenDecode -fuzztime 60s
func FuzzGenDecode(f *testing.F) {
	words, sections := goldenGenWords()
	for _, b := range [][]byte{
		encodeGen(f, 7, sections, words, 1000),
		encodeGen(f, 1, []uint64{3000}, genWords(3000, 0.01, 1), 3000),
		encodeGen(f, 1, []uint64{1000, 1}, make([]uint64, 1001), 1001),
	} {
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	if b, err := os.ReadFile(filepath.Join("testdata", "golden-v6.gen")); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, size := range []int64{int64(len(in)), -1} {
			d := NewGenDecoder(bytes.NewReader(in), size)
			h, err := d.Header()
			if err != nil {
				if !isFormatErr(err) {
					t.Fatalf("header: non-format error %v", err)
				}
				continue
			}
			if h.Words() > 1<<16 {
				if err := d.Verify(); err == nil {
					t.Fatalf("%d words from %d bytes", h.Words(), len(in))
				}
				continue
			}
			got := make([]uint64, h.Words())
			err = d.ReadWords(got)
			if err == nil {
				err = d.Verify()
			}
			if err != nil {
				if !isFormatErr(err) {
					t.Fatalf("non-format error %v", err)
				}
				continue
			}
			re := encodeGen(t, h.Generation, h.Sections, got, len(got))
			h2, again, _, err := decodeGen(re, int64(len(re)), len(got))
			if err != nil || h2.Generation != h.Generation || !slices.Equal(h2.Sections, h.Sections) || !slices.Equal(again, got) {
				t.Fatalf("re-encoded object decodes differently: %v", err)
			}
		}
	})
}
