package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// withRefs returns h as a manifest: one generation reference per generation.
func withRefs(h Header) Header {
	h.Refs = nil
	for i, g := range h.Gens {
		h.Refs = append(h.Refs, GenRef{
			Object:   h.Topic + ".p3.00000000000000000042." + strings.Repeat("g", i+1) + ".gen",
			Size:     int64(MinGenObjectSize + 100*i + int(g.Number%7)),
			Checksum: 0xdead0000 + uint32(i),
		})
	}
	return h
}

func encodeManifest(t testing.TB, h Header) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := EncodeManifest(&b, h); err != nil {
		t.Fatalf("EncodeManifest: %v", err)
	}
	return b.Bytes()
}

// encodeManifestVersion encodes a manifest in an older manifest version.
func encodeManifestVersion(t testing.TB, h Header, version uint16) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := encode(&b, &h, version, func(io.Writer) error { return nil }); err != nil {
		t.Fatalf("encode v%d: %v", version, err)
	}
	return b.Bytes()
}

// withOwner returns h with an owner epoch (version 7).
func withOwner(h Header) Header {
	h.OwnerEpoch = 0x0102030405060708
	return h
}

func TestManifestRoundTrip(t *testing.T) {
	for _, h := range []Header{withRefs(testHeader(3)), withRefs(withStages(testHeader(1))), withOwner(withRefs(goldenHeaderV5()))} {
		b := encodeManifest(t, h)
		for _, rk := range readerKinds {
			got, words, err := decodeAll(rk.wrap(b))
			if err != nil {
				t.Fatalf("%s: %v", rk.name, err)
			}
			want := asDecoded(h, CurrentVersion)
			if d := diffHeader(got, want); d != "" {
				t.Fatalf("%s: header differs:\n%s", rk.name, d)
			}
			if len(words) != 0 || got.DataBytes() != 0 || !got.Manifest() {
				t.Fatalf("%s: a manifest decoded %d words of data", rk.name, len(words))
			}
		}
	}
}

func TestManifestRefused(t *testing.T) {
	tests := map[string]func(h *Header){
		"no references":         func(h *Header) { h.Refs = nil },
		"one reference missing": func(h *Header) { h.Refs = h.Refs[1:] },
		"empty name":            func(h *Header) { h.Refs[0].Object = "" },
		"path escape":           func(h *Header) { h.Refs[1].Object = "a b" },
		"tiny object":           func(h *Header) { h.Refs[2].Size = MinGenObjectSize - 1 },
	}
	for name, mod := range tests {
		h := withRefs(testHeader(1))
		mod(&h)
		if err := EncodeManifest(&bytes.Buffer{}, h); !errors.Is(err, ErrInvalidHeader) {
			t.Errorf("%s: EncodeManifest = %v, want ErrInvalidHeader", name, err)
		}
	}
	if err := Encode(&bytes.Buffer{}, withRefs(testHeader(1)), nil); !errors.Is(err, ErrInvalidHeader) {
		t.Errorf("Encode of a header with references = %v, want ErrInvalidHeader", err)
	}
}

// TestManifestCorrupt flips every byte of a manifest: every change must be an error wrapping a
// sentinel, never a panic or a success.
func TestManifestCorrupt(t *testing.T) {
	b := encodeManifest(t, withRefs(withStages(testHeader(1))))
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x41
		for _, rk := range readerKinds {
			if _, _, err := decodeAll(rk.wrap(c)); !isFormatErr(err) {
				t.Fatalf("byte %d (%s): err = %v", i, rk.name, err)
			}
		}
	}
	patch := bytes.Clone(b)
	patch[8] = byte(CurrentVersion + 1)
	if _, err := DecodeHeader(bytes.NewReader(patch)); !errors.Is(err, ErrUnknownVersion) {
		t.Errorf("version %d: err = %v, want ErrUnknownVersion", patch[8], err)
	}
}

// goldenGenWords is the data of golden-v6.gen: a sparse chunk (Rice), a dense chunk (raw) and a
// short empty chunk in section 0, and a one-sector stage.
func goldenGenWords() ([]uint64, []uint64) {
	words := make([]uint64, 2*ChunkWords+100+8)
	for i := 0; i < 40; i++ {
		words[i*13] |= 1 << (i % 63)
	}
	for i := ChunkWords; i < 2*ChunkWords; i++ {
		words[i] = uint64(i)*0x9e3779b97f4a7c15>>1 | 1
	}
	words[len(words)-3] = 0x7000000000000001
	return words, []uint64{2*ChunkWords + 100, 8}
}

func TestGoldenV6(t *testing.T) {
	h := withRefs(goldenHeaderV5())
	words, sections := goldenGenWords()
	files := map[string][]byte{
		"golden-v6.snap": encodeManifestVersion(t, h, VersionV6),
		"golden-v6.gen":  encodeGen(t, 1234, sections, words, 300),
	}
	for name, b := range files {
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		onDisk, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (regenerate with -update)", err)
		}
		if !bytes.Equal(onDisk, b) {
			t.Errorf("%s: encoding no longer reproduces the golden file: bump the format version", name)
		}
	}
	m := files["golden-v6.snap"]
	got, _, err := decodeAll(bytes.NewReader(m))
	if err != nil || !slices.Equal(got.Refs, h.Refs) {
		t.Fatalf("golden manifest: refs %v, err %v", got.Refs, err)
	}
	le := binary.LittleEndian
	H := int(le.Uint32(m[10:]))
	refs := m[14+H-(4+3*(2+8+4)+len(h.Refs[0].Object)+len(h.Refs[1].Object)+len(h.Refs[2].Object)) : 14+H]
	if le.Uint16(m[8:]) != 6 || le.Uint32(refs) != 3 || le.Uint16(refs[4:]) != uint16(len(h.Refs[0].Object)) ||
		string(refs[6:6+len(h.Refs[0].Object)]) != h.Refs[0].Object ||
		le.Uint64(refs[6+len(h.Refs[0].Object):]) != uint64(h.Refs[0].Size) ||
		le.Uint32(refs[14+len(h.Refs[0].Object):]) != h.Refs[0].Checksum ||
		le.Uint64(m[18+H:]) != 0 || len(m) != 30+H {
		t.Error("golden manifest does not match the layout documented on Decoder")
	}
	gh, gw, _, err := decodeGen(files["golden-v6.gen"], -1, 100)
	if err != nil || gh.Generation != 1234 || !slices.Equal(gw, words) {
		t.Fatalf("golden generation object: %+v, err %v", gh, err)
	}
	g := files["golden-v6.gen"]
	if string(g[:8]) != GenMagic || le.Uint16(g[8:]) != 6 || le.Uint32(g[10:]) != 12+16 ||
		le.Uint64(g[14:]) != 1234 || le.Uint32(g[22:]) != 2 || le.Uint64(g[26:]) != sections[0] ||
		le.Uint32(g[42:]) != crc32.Checksum(g[:42], castagnoli) || g[46] < modeRice || g[46] > modeRice+maxRiceK {
		t.Error("golden generation object does not match the layout documented on GenDecoder")
	}
	var modes []byte
	for _, want := range []byte{modeRaw, modeEmpty} {
		if bytes.IndexByte(g[47:], want) >= 0 {
			modes = append(modes, want)
		}
	}
	if len(modes) != 2 {
		t.Error("golden generation object lacks a raw or an empty chunk")
	}
}

// goldenKeySpec is the key spec of golden-v7.snap.
const goldenKeySpec = "avro:meta.id"

// TestGoldenV7 pins version 7: version 6's manifest followed by the owner epoch and the identity
// section.
func TestGoldenV7(t *testing.T) {
	h := withOwner(withRefs(goldenHeaderV5()))
	h.KeySpec = goldenKeySpec
	b := encodeManifest(t, h)
	path := filepath.Join("testdata", "golden-v7.snap")
	if *update {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	onDisk, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (regenerate with -update)", err)
	}
	if !bytes.Equal(onDisk, b) {
		t.Error("encoding no longer reproduces golden-v7.snap: bump the format version")
	}
	got, _, err := decodeAll(bytes.NewReader(onDisk))
	if err != nil || got.Version != VersionV7 || got.KeySpec != goldenKeySpec || !got.KeySpecKnown() || !slices.Equal(got.Refs, h.Refs) {
		t.Fatalf("golden v7: version %d, key spec %q, refs %v, err %v", got.Version, got.KeySpec, got.Refs, err)
	}
	le := binary.LittleEndian
	H := int(le.Uint32(onDisk[10:]))
	tail := onDisk[14+H-2-len(goldenKeySpec)-1 : 14+H]
	if le.Uint16(onDisk[8:]) != 7 || int(le.Uint16(tail)) != len(goldenKeySpec) || string(tail[2:2+len(goldenKeySpec)]) != goldenKeySpec ||
		tail[len(tail)-1] != 0 || got.Signature != nil {
		t.Error("golden v7 manifest does not end its header with the identity section documented on Decoder")
	}
	if le.Uint64(onDisk[14+28:]) != SeedPrintOf(h.Seed) || got.Seed != 0 || !got.SeedMatches(h.Seed) || got.SeedMatches(h.Seed+1) ||
		bytes.Contains(onDisk, binary.LittleEndian.AppendUint64(nil, h.Seed)) {
		t.Error("golden v7 manifest does not hold the seed's fingerprint in place of the seed, as documented on Decoder")
	}
	if le.Uint64(onDisk[14+H-1-2-len(goldenKeySpec)-8:]) != h.OwnerEpoch || got.OwnerEpoch != h.OwnerEpoch {
		t.Errorf("golden v7 manifest: owner epoch %d, not before the identity section as documented on Decoder", got.OwnerEpoch)
	}
	v6, _, err := decodeAll(bytes.NewReader(encodeManifestVersion(t, withRefs(goldenHeaderV5()), VersionV6)))
	if err != nil || v6.KeySpec != "" || v6.KeySpecKnown() {
		t.Errorf("a v6 manifest decodes with key spec %q (known %v), err %v", v6.KeySpec, v6.KeySpecKnown(), err)
	}
	h.KeySpec = strings.Repeat("k", MaxKeySpecLen+1)
	if err := EncodeManifest(io.Discard, h); !errors.Is(err, ErrInvalidHeader) {
		t.Errorf("EncodeManifest with a key spec over MaxKeySpecLen: %v, want ErrInvalidHeader", err)
	}
}

// manifestWithObjects returns a manifest of goldenHeaderV5's filter whose generation objects are
// in the returned map: generation 1234 (with its stage) has one key's bits set, the others none.
func manifestWithObjects(t *testing.T) ([]byte, map[string][]byte) {
	t.Helper()
	h := goldenHeaderV5()
	objs := map[string][]byte{}
	for _, g := range h.Gens {
		secs := h.GenSections(g.Number)
		words := make([]uint64, sum(secs))
		if g.Number == 1234 {
			words[3], words[9] = 0b1011, 1<<62
		}
		b := encodeGen(t, g.Number, secs, words, len(words))
		_, _, crc, err := decodeGen(b, int64(len(b)), len(words))
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("orders.p3.00000000000000000009.g%03d.gen", g.Number%1000)
		objs[name] = b
		h.Refs = append(h.Refs, GenRef{Object: name, Size: int64(len(b)), Checksum: crc})
	}
	return encodeManifest(t, h), objs
}

func opener(objs map[string][]byte) ObjectOpener {
	return func(name string) (io.ReadCloser, int64, error) {
		b, ok := objs[name]
		if !ok {
			return nil, 0, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
		}
		return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
	}
}

func TestInspectManifest(t *testing.T) {
	m, objs := manifestWithObjects(t)
	var out bytes.Buffer
	if err := InspectManifest(&out, bytes.NewReader(m), opener(objs)); err != nil {
		t.Fatalf("InspectManifest: %v\n%s", err, out.String())
	}
	report := squeeze(out.String())
	t.Logf("report:\n%s", out.String())
	for _, want := range []string{"KDDPSNAP version 7 (manifest", "identity: not said by the writer", "generation objects:",
		"1234 orders.p3.00000000000000000009.g234.gen", "OK", "file checksum: OK"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if rows := genRows(out.String()); len(rows) != 3 || rows[0][6] == "-" || rows[0][5] == "0.0000" {
		t.Errorf("generation rows %q: want generation 1234's fill read from its object", rows)
	}

	damaged := maps.Clone(objs)
	name := "orders.p3.00000000000000000009.g233.gen"
	bad := bytes.Clone(objs[name])
	bad[len(bad)-3] ^= 0x40
	damaged[name] = bad
	delete(damaged, "orders.p3.00000000000000000009.g232.gen")
	out.Reset()
	err := InspectManifest(&out, bytes.NewReader(m), opener(damaged))
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged object: err = %v, want ErrCorrupt", err)
	}
	for _, want := range []string{"DAMAGED: snapshot: snapshot corrupt", "DAMAGED: orders.p3.00000000000000000009.g232.gen: file does not exist"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := Inspect(&out, bytes.NewReader(m)); err != nil || !strings.Contains(out.String(), "not read") {
		t.Errorf("Inspect of a manifest without objects: %v\n%s", err, out.String())
	}
}

func TestInspectGen(t *testing.T) {
	words, sections := goldenGenWords()
	b := encodeGen(t, 1234, sections, words, 100)
	var out bytes.Buffer
	if err := InspectGen(&out, bytes.NewReader(b)); err != nil {
		t.Fatalf("InspectGen: %v\n%s", err, out.String())
	}
	for _, want := range []string{"generation:  1234", "section 0:   stage 0, 1124 words", "section 1:   grown stage 1, 8 words", "checksum:    OK"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := InspectGen(&out, bytes.NewReader(b[:len(b)-1])); !errors.Is(err, ErrCorrupt) || !strings.Contains(out.String(), "NOT VERIFIED") {
		t.Errorf("truncated object: %v\n%s", err, out.String())
	}
}

// TestSignedManifest signs a manifest and checks it with the right key, another key, after a
// flipped reference sum (checksums recomputed, as an attacker who may write the store would),
// unsigned, and in an older version.
func TestSignedManifest(t *testing.T) {
	key, other := bytes.Repeat([]byte{7}, MinSigningKey), bytes.Repeat([]byte{8}, MinSigningKey)
	h := withOwner(withRefs(goldenHeaderV5()))
	for i := range h.Refs {
		h.Refs[i].SHA256[0] = byte(i + 1)
	}
	var b bytes.Buffer
	if err := EncodeSignedManifest(&b, h, key); err != nil {
		t.Fatal(err)
	}
	got, _, err := decodeAll(bytes.NewReader(b.Bytes()))
	if err != nil || !slices.Equal(got.Refs, h.Refs) || len(got.Signature) != 32 {
		t.Fatalf("signed manifest: refs %v, signature %x, err %v", got.Refs, got.Signature, err)
	}
	if err := got.VerifySignature(key); err != nil {
		t.Errorf("VerifySignature with the key: %v", err)
	}
	var report bytes.Buffer
	_ = Inspect(&report, bytes.NewReader(b.Bytes())) // the objects are absent: only the header matters
	if !strings.Contains(report.String(), "HMAC-SHA256") {
		t.Errorf("inspect does not report the signature:\n%s", report.String())
	}
	if err := got.VerifySignature(other); !errors.Is(err, ErrBadSignature) {
		t.Errorf("VerifySignature with another key: %v, want ErrBadSignature", err)
	}
	// Change the first reference's SHA-256 and recompute both CRCs.
	m := bytes.Clone(b.Bytes())
	le := binary.LittleEndian
	H := int(le.Uint32(m[10:]))
	m[14+H-32-32*len(h.Refs)] ^= 0xff
	le.PutUint32(m[14+H:], crc32.Checksum(m[:14+H], castagnoli))
	le.PutUint32(m[26+H:], crc32.Checksum(m[:26+H], castagnoli))
	if forged, _, err := decodeAll(bytes.NewReader(m)); err != nil || !errors.Is(forged.VerifySignature(key), ErrBadSignature) {
		t.Errorf("forged reference sum: decode %v, verify %v; want ErrBadSignature", err, forged.VerifySignature(key))
	}
	unsigned, _, err := decodeAll(bytes.NewReader(encodeManifest(t, h)))
	if err != nil || !errors.Is(unsigned.VerifySignature(key), ErrUnsigned) {
		t.Errorf("unsigned manifest: %v, %v; want ErrUnsigned", err, unsigned.VerifySignature(key))
	}
	v6, _, err := decodeAll(bytes.NewReader(encodeManifestVersion(t, withRefs(goldenHeaderV5()), VersionV6)))
	if err != nil || !errors.Is(v6.VerifySignature(key), ErrUnsigned) {
		t.Errorf("v6 manifest: %v, %v; want ErrUnsigned", err, v6.VerifySignature(key))
	}
	if err := EncodeSignedManifest(io.Discard, h, key[:31]); !errors.Is(err, ErrInvalidHeader) {
		t.Errorf("a 31-byte key: %v, want ErrInvalidHeader", err)
	}
	if err := EncodeSignedManifest(io.Discard, withRefs(goldenHeaderV5()), key); !errors.Is(err, ErrInvalidHeader) {
		t.Errorf("references without SHA-256: %v, want ErrInvalidHeader", err)
	}
}
