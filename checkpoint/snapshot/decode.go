package snapshot

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math"
	"time"
)

// Decoder reads one snapshot in two steps: Header reads and validates the
// header (magic, version, header CRC, parameter consistency, and — when the
// source can tell its size — that the file length matches what the header
// implies), then the caller allocates its own destination and pulls the
// bit data with Read (the Decoder is an io.Reader), which folds every byte
// into the running CRC32C. The trailing checksum is verified when the last data byte has
// been read, and at the latest by Verify.
//
// This is the format's specification. The byte layout of a version 7
// snapshot, the CurrentVersion: a manifest, whose data lives in generation
// objects (see GenDecoder). All integers are little-endian; the fields
// marked v2, v3, v4, v5, v6 or v7 are absent from the header body of older
// versions, which ends after the last field its version has; a v4 stage
// entry lacks the first-word bits. A snapshot of version 5 or older holds
// its data itself, after the header.
//
//	offset      size   field
//	0           8      magic "KDDPSNAP"
//	8           2      format version (uint16) = 7 (MinVersion..CurrentVersion are read)
//	10          4      H = header body length in bytes (uint32, <= MaxHeaderBytes)
//	14          H      header body:
//	  +0        4        generations N (uint32)
//	  +4        8        interval (int64 nanoseconds)
//	  +12       8        capacity per interval (uint64)
//	  +20       8        configured false positive rate (float64 IEEE-754 bits)
//	  +28       8        hash seed (uint64) up to v6; from v7 on its fingerprint
//	                     instead (SeedPrintOf: the first 8 bytes of SHA-256 over
//	                     "kdedup hash seed\x00" and the seed as uint64 LE, read
//	                     big-endian and stored LE), never the seed
//	  +36       4        K, bits a key sets per generation (uint32)
//	  +40       4        block bits: the size of one sector (uint32, multiple of 64)
//	  +44       8        groups (uint64)
//	  +52       4        slots per group (uint32, >= N)
//	  +56       8        words W (uint64) = groups × slots × sectors × blockBits/64
//	  +64       8        origin, start of generation number 0 (int64 unix ns)
//	  +72       8        epoch, the current generation's number (uint64)
//	  +80       8        rotation count (uint64)
//	  +88       8        created (int64 unix nanoseconds, 0 = unknown)
//	  +96       2+s      scope: uint16 length s, then s bytes ("partition" or "global")
//	            2+t      topic: uint16 length t, then t bytes
//	            4        partition (int32, -1 for global scope)
//	            4+20G    generation table: uint32 count G (<= N), then per live
//	                     generation, newest first: number (uint64), start (int64
//	                     unix ns), slot (uint32)
//	            4+12I    input offsets: uint32 count I, then per partition in
//	                     ascending order: partition (int32), next offset to consume (int64)
//	            4+12O    output offsets (v2 and later): uint32 count O, then per
//	                     partition ascending: partition (int32), high-water offset (int64)
//	            4        sectors S per block (v3; uint32, 1..MaxSectors; v1 and v2: 1)
//	            8×slots  slot use table (v3): per slot, its use (uint64)
//	            4        shard bits B (v4; uint32, <= MaxShardBits)
//	            4+8F     fill table (v4): uint32 count F (0 or slots × 2^B), then
//	                     per slot and shard, slot-major, the keys offered to the
//	                     slot's first stage (uint64)
//	            4+…      stage table (v4): uint32 count T, then per grown stage:
//	                     generation number (uint64), index (uint32, from 1),
//	                     groups (uint64), K (uint32), first-word bits (v5;
//	                     uint32, 1..K), sectors (uint32), words (uint64) =
//	                     groups × sectors × blockBits/64, then 2^B shard
//	                     counts (uint64)
//	            4        first-word bits F (v5; uint32, 1..K): bits a key
//	                     sets in one word of its block's sector 0
//	            4+…      generation references (v6): uint32 count R (= G), then
//	                     per entry of the generation table, in its order: the
//	                     name of the generation object holding the generation
//	                     (uint16 length, then the bytes), the object's size
//	                     (uint64) and trailing checksum (uint32)
//	            8        owner epoch (v7; uint64): the fencing token of the
//	                     replica that saved the manifest (see Header.OwnerEpoch)
//	            2+k      identity section (v7): the key spec (DEDUP_KEY) the
//	                     filter's identities were extracted with: uint16
//	                     length k (<= MaxKeySpecLen), then k bytes; empty
//	                     when the writer did not say
//	            1+…      signature section (v7): a flag (uint8): 0 for an
//	                     unsigned manifest, which ends here; 1 for a signed
//	                     one (EncodeSignedManifest), followed by 32R bytes:
//	                     the SHA-256 of each referenced generation object's
//	                     bytes, in the order of the references, then 32
//	                     bytes: HMAC-SHA256 with the signing key over the
//	                     file's bytes [0, 14+H-32), the preamble and every
//	                     header field before it; the header and file CRCs
//	                     cover it too
//	14+H        4      header CRC32C over bytes [0, 14+H)
//	18+H        8      data word count D (uint64): W up to version 5, 0 in a
//	                   manifest (v6 and later)
//	26+H        8D     data: D uint64 words, little-endian (v4: the slots'
//	                   words, then every stage's words)
//	26+H+8D     4      file CRC32C over bytes [0, 26+H+8D)
//	30+H+8D            end of file; trailing bytes are corruption
//
// Data layout, which the format treats as opaque except in Inspect: the
// words form Groups groups; each group holds, for each of its Sectors
// sectors, one SectorBits/64-word sector per slot; word w of sector i of
// slot s in group g is word ((g×Sectors + i)×Slots + s)×SectorBits/64 + w,
// except in version 5 for sector 0, which is stored word-major: its word w
// of slot s in group g is word g×Sectors×Slots×SectorBits/64 + w×Slots + s
// (a key sets F bits in one of these words, and the rest of its K bits in
// the other sectors). A grown stage is laid out as one slot.
// Each generation of the table owns the sectors of its slot; slots not in
// the table are free. From version 3 on the top bit of every word is a use tag:
// the parity of the slot use that last wrote the word. A word whose tag
// differs from the parity of its slot's entry in the use table holds bits
// of an expired generation and reads as empty; the other 63 bits are data.
// In version 4 the grown stages' words follow the slots' words, stage after
// stage in the order of the stage table: word w of sector i of group g of a
// stage is its word (g×Sectors + i)×SectorBits/64 + w; stage words carry no
// tag (bit 63 is 0).
// Versions 1 and 2 have one sector of 512 data bits per block and no tags,
// versions 3 and 4 spread a key's bits over all sectors: layouts of an older
// kdedup, which the current filter refuses. A manifest's generation objects
// hold each live generation's words in a canonical form (see GenDecoder):
// the generation's block in every group (sector 0's words, then each other
// sector's, as one slot lays them out), tags cleared, then its stages'
// words; slots not in the table are empty.
//
// Every failure caused by the file's contents wraps ErrCorrupt (checksum
// mismatch, truncation, trailing bytes, lengths or parameters that cannot be
// right), ErrNotSnapshot (wrong magic) or ErrUnknownVersion; errors from the
// underlying reader are wrapped and returned as they are. Errors are sticky.
// Lengths are bounded before anything is allocated: the header body by
// MaxHeaderBytes (and read incrementally, so a lying length costs at most
// what the file really contains), the data by MaxDataBytes and by the file
// size when NewDecoderSize is given it.
//
// A Decoder is not safe for concurrent use. Data returned by Read is not
// trustworthy until the trailing checksum has been verified (Read reports a
// mismatch itself with the last data byte; otherwise call Verify).
type Decoder struct {
	r       *bufio.Reader
	avail   int64 // bytes from the snapshot start to EOF, -1 if unknown
	lenient bool  // Inspect mode: tolerate header CRC and size mismatches

	crc uint32 // running CRC32C of everything consumed
	n   int64  // bytes consumed

	hdr     Header
	hdrRead bool
	hdrErr  error

	headerCRCErr error // lenient: header checksum mismatch
	sizeErr      error // lenient: file size disagrees with the header

	remaining uint64 // data bytes not yet read
	err       error  // sticky data error
	done      bool   // trailer checked
	finErr    error  // result of the trailer check
	scratch   []byte
}

// NewDecoderSize returns a Decoder reading a snapshot from r, which must be
// positioned at the start of the snapshot; size is the number of bytes from
// r's position to its end, or -1 when unknown. A store that knows an
// object's length passes it here, so the data length the header implies is
// checked against the bytes really available before the caller allocates
// anything. NewDecoderSize itself does not read.
func NewDecoderSize(r io.Reader, size int64) *Decoder {
	return newDecoder(r, max(size, -1), false)
}

func newDecoder(r io.Reader, avail int64, lenient bool) *Decoder {
	return &Decoder{
		r:       bufio.NewReaderSize(r, readerSize(avail)),
		avail:   avail,
		lenient: lenient,
	}
}

// readBody reads a header body of n bytes, or what is left of r when it ends first. Of an input
// of unknown size it reads incrementally, so that a lying length costs at most the bytes really
// present (ReadAll grows its buffer as data arrives); of one whose size is known, and was checked
// to hold n bytes more, it reads into a buffer of n bytes at once.
func readBody(r io.Reader, n uint32, sized bool) ([]byte, error) {
	if !sized {
		return io.ReadAll(io.LimitReader(r, int64(n)))
	}
	body := make([]byte, n)
	k, err := io.ReadFull(r, body)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil // the caller finds the body short
	}
	return body[:k], err
}

// availableBytes returns how many bytes src holds from its current position
// to its end, or -1 when src cannot tell.
func availableBytes(src io.Reader) int64 {
	s, ok := src.(io.Seeker)
	if !ok {
		return -1
	}
	var size int64
	switch v := src.(type) {
	case interface{ Size() int64 }:
		size = v.Size()
	case interface{ Stat() (fs.FileInfo, error) }:
		fi, err := v.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return -1
		}
		size = fi.Size()
	default:
		return -1
	}
	pos, err := s.Seek(0, io.SeekCurrent)
	if err != nil || pos < 0 {
		return -1
	}
	return max(size-pos, 0)
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// readFull reads len(p) bytes into p and folds them into the CRC.
func (d *Decoder) readFull(p []byte, what string) error {
	n, err := io.ReadFull(d.r, p)
	d.crc = crc32.Update(d.crc, castagnoli, p[:n])
	d.n += int64(n)
	return d.readErr(err, what)
}

func (d *Decoder) readErr(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return corruptf("truncated in %s at byte %d", what, d.n)
	default:
		return fmt.Errorf("snapshot: reading %s: %w", what, err)
	}
}

// Header reads and validates the snapshot header, leaving the decoder
// positioned at the first data word. It reads the header only once; later
// calls return the same result. The returned Header shares its table and
// maps with the decoder. On failure it returns the zero Header and an error
// wrapping ErrCorrupt, ErrNotSnapshot, ErrUnknownVersion or the reader's
// error.
func (d *Decoder) Header() (Header, error) {
	if !d.hdrRead {
		d.hdrRead = true
		d.hdrErr = d.readHeader()
		if d.hdrErr != nil {
			d.hdr = Header{}
		}
	}
	return d.hdr, d.hdrErr
}

func (d *Decoder) readHeader() error {
	var pre [preambleLen]byte
	n, err := io.ReadFull(d.r, pre[:len(Magic)])
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("snapshot: reading magic: %w", err)
	}
	if string(pre[:n]) != Magic[:n] {
		return fmt.Errorf("%w: bad magic %q", ErrNotSnapshot, pre[:n])
	}
	if n < len(Magic) {
		return corruptf("truncated in magic after %d bytes", n)
	}
	d.crc = crc32.Update(d.crc, castagnoli, pre[:n])
	d.n += int64(n)
	if err := d.readFull(pre[len(Magic):], "preamble"); err != nil {
		return err
	}
	version := binary.LittleEndian.Uint16(pre[8:])
	if !knownVersion(version) {
		return fmt.Errorf("%w: version %d (this build reads %d to %d)", ErrUnknownVersion, version, MinVersion, CurrentVersion)
	}
	bodyLen := binary.LittleEndian.Uint32(pre[10:])
	if bodyLen > MaxHeaderBytes || bodyLen < minBodyLen(version) {
		return corruptf("header length %d out of range [%d,%d]", bodyLen, minBodyLen(version), MaxHeaderBytes)
	}
	if d.avail >= 0 && int64(preambleLen)+int64(bodyLen)+4+8 > d.avail {
		return corruptf("header length %d exceeds the %d-byte file", bodyLen, d.avail)
	}
	body, err := readBody(d.r, bodyLen, d.avail >= 0)
	d.crc = crc32.Update(d.crc, castagnoli, body)
	d.n += int64(len(body))
	if err != nil {
		return fmt.Errorf("snapshot: reading header: %w", err)
	}
	if len(body) != int(bodyLen) {
		return corruptf("truncated in header body at byte %d", d.n)
	}
	want := d.crc
	var c [4]byte
	if err := d.readFull(c[:], "header checksum"); err != nil {
		return err
	}
	if got := binary.LittleEndian.Uint32(c[:]); got != want {
		d.headerCRCErr = corruptf("header checksum mismatch (stored %08x, computed %08x)", got, want)
		if !d.lenient {
			return d.headerCRCErr
		}
	}
	h, err := parseBody(body, version)
	if err != nil {
		return corruptf("header: %v", err)
	}
	if h.Signature != nil { // what the HMAC covers: everything before it
		h.signed = append(pre[:], body[:len(body)-len(h.Signature)]...)
	}
	var wc [8]byte
	if err := d.readFull(wc[:], "data word count"); err != nil {
		return err
	}
	if got := binary.LittleEndian.Uint64(wc[:]); got != h.DataBytes()/8 {
		return corruptf("data word count %d, header declares %d", got, h.DataBytes()/8)
	}
	d.remaining = h.DataBytes()
	if d.avail >= 0 {
		if want := uint64(d.n) + d.remaining + 4; uint64(d.avail) != want {
			d.sizeErr = corruptf("file is %d bytes, header implies %d", d.avail, want)
			if !d.lenient {
				return d.sizeErr
			}
		}
	}
	d.hdr = h
	return nil
}

// minBodyLen is the smallest header body the version can have.
func minBodyLen(version uint16) uint32 {
	n := uint32(fixedBodyLen + 2 + 2 + 4 + 4 + 4)
	if version >= VersionV2 {
		n += 4
	}
	if version >= VersionV3 {
		n += 4 + 8 // sectors and at least one slot use
	}
	if version >= VersionV4 {
		n += 4 + 4 + 4 // shard bits, fill and stage counts
	}
	if version >= VersionV5 {
		n += 4 // first-word bits
	}
	if version >= VersionV6 {
		n += 4 // reference count
	}
	if version >= VersionV7 {
		n += 2 // key spec length
	}
	return n
}

// cursor decodes little-endian fields from a header body, remembering the
// first overrun.
type cursor struct {
	b   []byte
	err error
}

func (c *cursor) take(n int) []byte {
	if c.err != nil {
		return nil
	}
	if n < 0 || n > len(c.b) {
		c.err = fmt.Errorf("field of %d bytes overruns the header (%d left)", n, len(c.b))
		return nil
	}
	v := c.b[:n:n]
	c.b = c.b[n:]
	return v
}

func (c *cursor) u16() uint16 {
	if b := c.take(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (c *cursor) u32() uint32 {
	if b := c.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (c *cursor) u64() uint64 {
	if b := c.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (c *cursor) str() string { return string(c.take(int(c.u16()))) }

// count reads a table length and checks that the table (entry bytes each)
// fits in what is left of the header.
func (c *cursor) count(what string, limit int, entry int) int {
	n := c.u32()
	if c.err != nil {
		return 0
	}
	if uint64(n) > uint64(limit) || uint64(n)*uint64(entry) > uint64(len(c.b)) {
		c.err = fmt.Errorf("%s table of %d entries does not fit (limit %d, %d bytes left)", what, n, limit, len(c.b))
		return 0
	}
	return int(n)
}

func (c *cursor) offsets(what string) map[int32]int64 {
	n := c.count(what+" offset", MaxOffsets, 12)
	m := make(map[int32]int64, n)
	prev := int64(-1)
	for range n {
		p, o := int32(c.u32()), int64(c.u64())
		if int64(p) <= prev && c.err == nil {
			c.err = fmt.Errorf("%s offset table: partition %d is negative or out of ascending order", what, p)
		}
		prev = int64(p)
		m[p] = o
	}
	return m
}

// slotUses reads the slot use table of n entries, checking first that it
// fits in what is left of the header.
func (c *cursor) slotUses(n int) []uint64 {
	if c.err != nil {
		return nil
	}
	if n < 0 || n > MaxSlots || uint64(n)*8 > uint64(len(c.b)) {
		c.err = fmt.Errorf("slot use table of %d entries does not fit (limit %d, %d bytes left)", n, MaxSlots, len(c.b))
		return nil
	}
	u := make([]uint64, n)
	for i := range u {
		u[i] = c.u64()
	}
	return u
}

// stages reads the version 4 tables into h (with the stages' first-word
// bits in version 5), checking each length against what is left of the
// header first.
func (c *cursor) stages(h *Header, version uint16) {
	h.ShardBits = int(c.u32())
	if c.err == nil && h.ShardBits > MaxShardBits {
		c.err = fmt.Errorf("shard bits %d out of range [0,%d]", h.ShardBits, MaxShardBits)
	}
	if c.err != nil {
		return
	}
	if n := c.count("fill", MaxSlots<<MaxShardBits, 8); n > 0 {
		h.Fill = make([]uint64, n)
	}
	for i := range h.Fill {
		h.Fill[i] = c.u64()
	}
	shards := 1 << h.ShardBits
	entry := 36 + 8*shards
	if version >= VersionV5 {
		entry += 4
	}
	if n := c.count("stage", MaxStages, entry); n > 0 {
		h.Stages = make([]Stage, n)
	}
	for i := range h.Stages {
		st := &h.Stages[i]
		st.Generation = c.u64()
		st.Index = int(c.u32())
		st.Groups = c.u64()
		st.K = int(c.u32())
		if version >= VersionV5 {
			st.FirstBits = int(c.u32())
		}
		st.Sectors = int(c.u32())
		st.Words = c.u64()
		st.Counts = make([]uint64, shards)
		for j := range st.Counts {
			st.Counts[j] = c.u64()
		}
	}
}

// refs reads the version 6 generation references, checking the count against
// what is left of the header first.
func (c *cursor) refs() []GenRef {
	n := c.count("generation reference", MaxGenerations, 2+8+4)
	refs := make([]GenRef, n)
	for i := range refs {
		refs[i].Object = c.str()
		refs[i].Size = int64(c.u64())
		refs[i].Checksum = c.u32()
	}
	return refs
}

// signature decodes the version 7 signature section: a flag, and when it is 1 a SHA-256 per
// generation reference and the HMAC.
func (c *cursor) signature(h *Header) {
	b := c.take(1)
	switch {
	case b == nil || b[0] == 0:
		return
	case b[0] != 1:
		c.err = fmt.Errorf("signature flag %d, want 0 or 1", b[0])
		return
	}
	for i := range h.Refs {
		if s := c.take(sha256.Size); s != nil {
			copy(h.Refs[i].SHA256[:], s)
		}
	}
	h.Signature = c.take(sha256.Size)
}

// parseBody decodes and validates a header body.
func parseBody(body []byte, version uint16) (Header, error) {
	c := &cursor{b: body}
	h := Header{Version: version}
	h.Generations = int(c.u32())
	h.Interval = time.Duration(c.u64())
	h.Capacity = c.u64()
	h.FalsePositiveRate = math.Float64frombits(c.u64())
	if version >= VersionV7 {
		h.SeedPrint = c.u64()
	} else {
		h.Seed = c.u64()
	}
	h.K = int(c.u32())
	h.SectorBits = int(c.u32())
	h.Groups = c.u64()
	h.Slots = int(c.u32())
	h.Words = c.u64()
	h.Origin = nsTime(int64(c.u64()))
	h.Epoch = c.u64()
	h.Rotations = c.u64()
	h.Created = nsTime(int64(c.u64()))
	h.Scope = c.str()
	h.Topic = c.str()
	h.Partition = int32(c.u32())
	n := c.count("generation", MaxGenerations, genEntryLen)
	h.Gens = make([]Generation, n)
	for i := range h.Gens {
		h.Gens[i].Number = c.u64()
		h.Gens[i].Start = nsTime(int64(c.u64()))
		h.Gens[i].Slot = int(c.u32())
	}
	h.InputOffsets = c.offsets("input")
	if version >= VersionV2 {
		h.OutputOffsets = c.offsets("output")
	}
	h.Sectors = 1
	if version >= VersionV3 {
		h.Sectors = int(c.u32())
		h.SlotUses = c.slotUses(h.Slots)
	}
	if version >= VersionV4 {
		c.stages(&h, version)
	}
	if version >= VersionV5 {
		h.FirstBits = int(c.u32())
	}
	if version >= VersionV6 {
		h.Refs = c.refs()
	}
	if version >= VersionV7 {
		h.OwnerEpoch = c.u64()
		h.KeySpec = c.str()
		c.signature(&h)
	}
	if c.err != nil {
		return Header{}, c.err
	}
	if len(c.b) != 0 {
		return Header{}, fmt.Errorf("%d unexpected bytes at the end of the header", len(c.b))
	}
	if err := h.check(version); err != nil {
		return Header{}, err
	}
	return h, nil
}

// consume folds data bytes into the CRC and the counters.
func (d *Decoder) consume(p []byte) {
	d.crc = crc32.Update(d.crc, castagnoli, p)
	d.n += int64(len(p))
	d.remaining -= uint64(len(p))
}

// readData fills p (len(p) <= remaining) with data bytes.
func (d *Decoder) readData(p []byte) error {
	n, err := io.ReadFull(d.r, p)
	d.consume(p[:n])
	if err != nil {
		d.err = d.readErr(err, "data")
	}
	return d.err
}

// finish verifies the trailing checksum and that nothing follows it. It
// runs once; its result is remembered.
func (d *Decoder) finish() error {
	if d.done {
		return d.finErr
	}
	d.done = true
	want := d.crc
	var c [4]byte
	n, err := io.ReadFull(d.r, c[:])
	d.n += int64(n)
	if err != nil {
		d.finErr = d.readErr(err, "file checksum")
		return d.finErr
	}
	if got := binary.LittleEndian.Uint32(c[:]); got != want {
		d.finErr = corruptf("file checksum mismatch (stored %08x, computed %08x)", got, want)
		return d.finErr
	}
	if _, err := d.r.ReadByte(); err == nil {
		d.finErr = corruptf("trailing bytes after the file checksum at byte %d", d.n)
	} else if !errors.Is(err, io.EOF) {
		d.finErr = fmt.Errorf("snapshot: reading past the checksum: %w", err)
	}
	return d.finErr
}

// Read implements io.Reader over the data section: it yields exactly
// Header().Words×8 bytes (the words, little-endian) and then io.EOF — or,
// instead of io.EOF, an error wrapping ErrCorrupt if the trailing checksum
// does not match. The check also runs as soon as the last data byte has been
// returned, in which case a mismatch comes back with that final read. Read
// reads the header first if Header has not been called.
func (d *Decoder) Read(p []byte) (int, error) {
	if _, err := d.Header(); err != nil {
		return 0, err
	}
	if d.err != nil {
		return 0, d.err
	}
	if d.remaining == 0 {
		if err := d.finish(); err != nil {
			return 0, err
		}
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if uint64(len(p)) > d.remaining {
		p = p[:d.remaining]
	}
	n, err := d.r.Read(p)
	d.consume(p[:n])
	switch {
	case err == nil || (errors.Is(err, io.EOF) && d.remaining == 0):
	case errors.Is(err, io.EOF):
		d.err = corruptf("truncated in data at byte %d (%d data bytes missing)", d.n, d.remaining)
		return n, d.err
	default:
		d.err = fmt.Errorf("snapshot: reading data: %w", err)
		return n, d.err
	}
	if d.remaining == 0 {
		if err := d.finish(); err != nil {
			return n, err
		}
	}
	return n, nil
}

// buffer returns a scratch slice of n bytes (n <= wordChunk*8).
func (d *Decoder) buffer(n int) []byte {
	if cap(d.scratch) < n {
		d.scratch = make([]byte, max(n, min(wordChunk*8, int(min(d.remaining, math.MaxInt32)))))
	}
	return d.scratch[:n]
}

// Verify reads and checksums whatever data has not been read yet, then
// checks the trailing checksum and that nothing follows it. It returns nil
// only if the whole snapshot is intact; otherwise an error wrapping
// ErrCorrupt (or the reader's error, or the header's error). It is safe to
// call more than once.
func (d *Decoder) Verify() error {
	if _, err := d.Header(); err != nil {
		return err
	}
	for d.err == nil && d.remaining > 0 {
		b := d.buffer(int(min(d.remaining, wordChunk*8)))
		_ = d.readData(b)
	}
	if d.err != nil {
		return d.err
	}
	if err := d.finish(); err != nil {
		return err
	}
	if d.headerCRCErr != nil {
		return d.headerCRCErr
	}
	return d.sizeErr
}
