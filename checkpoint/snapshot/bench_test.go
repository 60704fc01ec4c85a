package snapshot

import (
	"bufio"
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/kdedup/kdedup/internal/ckpttest"
)

// Large benchmarks: encode/decode a snapshot of -ckpt.benchmib MiB to/from a
// file, beside plain-file baselines of the same size in the same run:
//
//	go test ./checkpoint/snapshot -run '^$' -bench Large -benchtime 5x
//	go test ./checkpoint/snapshot -run '^$' -bench Large -benchtime 3x -ckpt.benchmib 1024
var benchMiB = flag.Int("ckpt.benchmib", 256, "payload size in MiB of the checkpoint Large benchmarks")

// largeFixture writes the payload once as a raw file and as a snapshot.
type largeFixture struct {
	h     Header
	words []uint64
	raw   []byte
	rawF  string // raw payload file
	snapF string // snapshot file
	dir   string
}

func newLargeFixture(b *testing.B) *largeFixture {
	b.Helper()
	dir := b.TempDir()
	words := uint64(*benchMiB) << 20 / 8
	h := testHeader(words / 64)
	fx := &largeFixture{h: h, words: ckpttest.Words(h.Words, 1), dir: dir,
		rawF: filepath.Join(dir, "raw.bin"), snapF: filepath.Join(dir, "snap.snap")}
	var buf bytes.Buffer
	buf.Grow(int(h.DataBytes()))
	_ = WriteWords(&buf, fx.words)
	fx.raw = buf.Bytes()
	if err := os.WriteFile(fx.rawF, fx.raw, 0o644); err != nil {
		b.Fatal(err)
	}
	fx.encodeTo(b, fx.snapF)
	syncFS() // do not let the fixture's writeback disturb the first measurement
	return fx
}

// encodeTo writes the snapshot to path the way DirStore.Save does (1 MiB
// buffer, no fsync: the baselines do not fsync either).
func (fx *largeFixture) encodeTo(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := Encode(bw, fx.h, func(w io.Writer) error { return WriteWords(w, fx.words) }); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

func (fx *largeFixture) decode(b *testing.B, dst []uint64) {
	f, err := os.Open(fx.snapF)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := Decode(f, func(Header) ([]uint64, error) { return dst, nil }); err != nil {
		b.Fatal(err)
	}
}

func (fx *largeFixture) readFile(b *testing.B) {
	if _, err := os.ReadFile(fx.rawF); err != nil {
		b.Fatal(err)
	}
}

func (fx *largeFixture) readFull(b *testing.B, dst []byte) {
	f, err := os.Open(fx.rawF)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := io.ReadFull(f, dst); err != nil {
		b.Fatal(err)
	}
}

func (fx *largeFixture) copyFile(b *testing.B, to string) {
	src, err := os.Open(fx.rawF)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		b.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		b.Fatal(err)
	}
}

func (fx *largeFixture) writeFile(b *testing.B, to string) {
	if err := os.WriteFile(to, fx.raw, 0o644); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLarge measures file throughput of Encode and Decode of one
// large snapshot beside the plain-file baselines, and reports the ratios
// measured in the same iterations (x-vs-… metrics; 1.0 = as fast as the
// baseline). These are sequential by nature (one snapshot, one file).
func BenchmarkLarge(b *testing.B) {
	fx := newLargeFixture(b)
	size := int64(fx.h.DataBytes())
	out := filepath.Join(fx.dir, "out")

	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(size)
		for b.Loop() {
			fx.encodeTo(b, out)
		}
	})
	b.Run("baseline-iocopy", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(size)
		for b.Loop() {
			fx.copyFile(b, out)
		}
	})
	b.Run("baseline-writefile", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(size)
		for b.Loop() {
			fx.writeFile(b, out)
		}
	})
	b.Run("decode", func(b *testing.B) {
		dst := make([]uint64, fx.h.Words)
		fx.decode(b, dst) // warm up: fault the destination in
		b.ReportAllocs()
		b.SetBytes(size)
		for b.Loop() {
			fx.decode(b, dst)
		}
	})
	b.Run("baseline-readfile", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(size)
		for b.Loop() {
			fx.readFile(b)
		}
	})
	b.Run("baseline-readfull", func(b *testing.B) {
		dst := make([]byte, size)
		fx.readFull(b, dst) // warm up: fault the destination in
		b.ReportAllocs()
		b.SetBytes(size)
		for b.Loop() {
			fx.readFull(b, dst)
		}
	})
	// Ratios: each iteration runs the contenders back to back (alternating
	// the order), and the best time of each is compared, which keeps the
	// ratio meaningful on a noisy shared machine.
	b.Run("ratio-restore", func(b *testing.B) {
		// A real restore: decode into a freshly allocated destination,
		// against os.ReadFile, which also allocates.
		ckpttest.Ratio(b, size, map[string]func(){
			"decode-fresh": func() { fx.decode(b, make([]uint64, fx.h.Words)) },
			"readfile":     func() { fx.readFile(b) },
		}, "decode-fresh", "readfile")
	})
	b.Run("ratio-decode-prealloc", func(b *testing.B) {
		dst := make([]uint64, fx.h.Words)
		raw := make([]byte, size)
		ckpttest.Ratio(b, size, map[string]func(){
			"decode":   func() { fx.decode(b, dst) },
			"readfull": func() { fx.readFull(b, raw) },
		}, "decode", "readfull")
	})
	b.Run("ratio-encode", func(b *testing.B) {
		ckpttest.Ratio(b, size, map[string]func(){
			"encode":    func() { fx.encodeTo(b, out) },
			"iocopy":    func() { fx.copyFile(b, out) },
			"writefile": func() { fx.writeFile(b, out) },
		}, "encode", "iocopy", "writefile")
	})
}

// BenchmarkSmallParallel encodes and decodes a 64 KiB snapshot in memory
// from all Ps, beside a plain copy of the same bytes.
func BenchmarkSmallParallel(b *testing.B) {
	h := testHeader(128) // 8192 words = 64 KiB
	words := ckpttest.Words(h.Words, 1)
	snap := encodeBytes(b, h, SingleFileVersion, words)
	size := int64(h.DataBytes())
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(size)
		b.RunParallel(func(pb *testing.PB) {
			var buf bytes.Buffer
			buf.Grow(len(snap))
			for pb.Next() {
				buf.Reset()
				if err := Encode(&buf, h, func(w io.Writer) error { return WriteWords(w, words) }); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(size)
		b.RunParallel(func(pb *testing.PB) {
			dst := make([]uint64, h.Words)
			for pb.Next() {
				if _, err := Decode(bytes.NewReader(snap), func(Header) ([]uint64, error) { return dst, nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("baseline-copy", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(size)
		b.RunParallel(func(pb *testing.PB) {
			dst := make([]byte, len(snap))
			for pb.Next() {
				if _, err := io.ReadFull(bytes.NewReader(snap), dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
