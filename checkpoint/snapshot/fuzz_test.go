package snapshot

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
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
	for _, name := range []string{"golden-v1.snap", "golden-v2.snap", "golden-v3.snap", "golden-v4.snap", "golden-v5.snap"} {
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
				words = make([]uint64, h.Words)
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
	g5 := goldenHeaderV5()
	f.Add(appendBody(nil, &g5, VersionV5), VersionV5)
	f.Fuzz(func(t *testing.T, body []byte, version uint16) {
		if version < MinVersion || version > CurrentVersion {
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
