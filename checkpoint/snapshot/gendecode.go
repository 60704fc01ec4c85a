package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// GenDecoder reads one generation object: Header reads and validates the header, then ReadWords
// returns the decoded words in order and verifies the trailing checksum when it returns the last
// one (Verify does it at the latest).
//
// A generation object holds the words of one generation of a filter, referenced by the manifests
// that include the generation (see Decoder for the manifest). Its data is the generation's
// canonical form, which does not depend on how the filter interleaves generations in memory:
// section 0 is the generation's block in every group, group after group, each block its sectors
// in order, each sector its SectorBits/64 words, with the use tag bit cleared (words of an expired
// use read as 0); section i ≥ 1 is the generation's grown stage i as the stage stores it. The
// byte layout (all integers little-endian):
//
//	offset  size   field
//	0       8      magic "KDDPGENR"
//	8       2      format version (uint16) = 6
//	10      4      H = header body length in bytes (uint32) = 12 + 8×S
//	14      H      header body:
//	  +0    8        generation number (uint64)
//	  +8    4        section count S (uint32, 1..MaxSections)
//	  +12   8×S      words of each section (uint64, each >= 1)
//	14+H    4      header CRC32C over bytes [0, 14+H)
//	18+H    …      data: the sections in order, each cut into chunks of ChunkWords words
//	               (its last chunk may be shorter), each chunk stored as one record or as
//	               part of a run of empty chunks:
//	                 mode 0     (byte) a run of c empty chunks: uvarint c, 1 to the chunks
//	                            left in the section
//	                 mode 1     (byte) raw: the chunk's words
//	                 mode 2+k   (byte, k = 0..15) Rice: uvarint n (set bits, 1 to the chunk's
//	                            bits), uvarint L (bytes, fewer than the raw chunk's), then L
//	                            bytes coding the n gaps
//	end-4   4      CRC32C over bytes [0, 18+H) followed by the decoded words (the bytes a raw
//	               encoding of every chunk would hold): the checksum covers what is decoded
//	end            end of object; trailing bytes are corruption
//
// A Rice record codes the chunk's set bits in increasing position (bit b of word w is position
// 64w + b): each by its gap, the number of clear positions since the previous set bit (or since
// the chunk's start). The gaps form a bit stream, least significant bit of each byte first: a
// gap g with quotient q = g>>k below 24 is q zero bits, a one bit, then the k low bits of g (low
// bit first); a gap with q >= 24 is 24 zero bits, a one bit, then g in 15 bits. The stream ends
// with zero bits to its last byte.
//
// Failures caused by the object's contents wrap ErrCorrupt, ErrNotSnapshot (wrong magic) or
// ErrUnknownVersion; reader errors are wrapped as they are. Errors are sticky. A GenDecoder is not
// safe for concurrent use.
type GenDecoder struct {
	r     *bufio.Reader
	avail int64
	n     int64  // bytes consumed
	crc   uint32 // over the header bytes and the decoded words

	hdr     GenHeader
	hdrRead bool
	hdrErr  error

	section int
	left    uint64   // words of the current section not yet decoded into a chunk
	chunk   []uint64 // a decoded chunk whose words are not all returned yet
	next    int      // index of the first word of chunk not yet returned
	run     uint64   // empty chunks of the current run not yet decoded
	stream  []byte
	scratch []byte
	err     error
	done    bool
	finErr  error
}

// NewGenDecoder returns a GenDecoder reading a generation object from r; size is its length in
// bytes, or -1 when unknown.
func NewGenDecoder(r io.Reader, size int64) *GenDecoder {
	return &GenDecoder{r: bufio.NewReaderSize(r, 64<<10), avail: max(size, -1)}
}

// Header reads and validates the object's header, once; later calls return the same result.
func (d *GenDecoder) Header() (GenHeader, error) {
	if !d.hdrRead {
		d.hdrRead = true
		d.hdr, d.hdrErr = d.readHeader()
		if d.hdrErr != nil {
			d.hdr = GenHeader{}
		}
	}
	return d.hdr, d.hdrErr
}

func (d *GenDecoder) readHeader() (GenHeader, error) {
	var pre [preambleLen]byte
	n, err := io.ReadFull(d.r, pre[:])
	d.n += int64(n)
	if m := min(n, len(GenMagic)); string(pre[:m]) != GenMagic[:m] {
		return GenHeader{}, fmt.Errorf("%w: bad magic %q for a generation object", ErrNotSnapshot, pre[:m])
	}
	if err != nil {
		return GenHeader{}, readErr(err, "generation object preamble", d.n)
	}
	if v := binary.LittleEndian.Uint16(pre[8:]); v != VersionV6 {
		return GenHeader{}, fmt.Errorf("%w: generation object version %d (this build reads %d)", ErrUnknownVersion, v, VersionV6)
	}
	bodyLen := binary.LittleEndian.Uint32(pre[10:])
	if bodyLen < 12+8 || bodyLen > 12+8*MaxSections || (bodyLen-12)%8 != 0 {
		return GenHeader{}, corruptf("generation object header length %d out of range", bodyLen)
	}
	if d.avail >= 0 && int64(preambleLen)+int64(bodyLen)+4+4 > d.avail {
		return GenHeader{}, corruptf("generation object header length %d exceeds the %d-byte object", bodyLen, d.avail)
	}
	body := make([]byte, bodyLen+4)
	n, err = io.ReadFull(d.r, body)
	d.n += int64(n)
	if err != nil {
		return GenHeader{}, readErr(err, "generation object header", d.n)
	}
	crc := crc32.Update(crc32.Checksum(pre[:], castagnoli), castagnoli, body[:bodyLen])
	if got := binary.LittleEndian.Uint32(body[bodyLen:]); got != crc {
		return GenHeader{}, corruptf("generation object header checksum mismatch (stored %08x, computed %08x)", got, crc)
	}
	d.crc = crc32.Update(crc, castagnoli, body[bodyLen:])
	h := GenHeader{Version: VersionV6, Generation: binary.LittleEndian.Uint64(body)}
	if int(binary.LittleEndian.Uint32(body[8:])) != int(bodyLen-12)/8 {
		return GenHeader{}, corruptf("generation object section count disagrees with its header length")
	}
	for i := 12; i < int(bodyLen); i += 8 {
		h.Sections = append(h.Sections, binary.LittleEndian.Uint64(body[i:]))
	}
	if err := h.check(); err != nil {
		return GenHeader{}, corruptf("generation object header: %v", err)
	}
	d.left = h.Sections[0]
	return h, nil
}

// readErr classifies a read error: an early end is corruption, anything else the reader's.
func readErr(err error, what string, at int64) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corruptf("truncated in %s at byte %d", what, at)
	}
	return fmt.Errorf("snapshot: reading %s: %w", what, err)
}

// ReadWords fills dst with the next len(dst) words of the object's data (across sections). When
// it returns the last word it also verifies the trailing checksum, and returns an error wrapping
// ErrCorrupt on a mismatch, in which case everything read must be discarded. It fails without
// reading if dst is longer than the words left.
func (d *GenDecoder) ReadWords(dst []uint64) error {
	if _, err := d.Header(); err != nil {
		return err
	}
	if d.err != nil {
		return d.err
	}
	if uint64(len(dst)) > d.wordsLeft() {
		return fmt.Errorf("snapshot: ReadWords of %d words, but only %d are left", len(dst), d.wordsLeft())
	}
	for len(dst) > 0 && d.err == nil {
		if d.next < len(d.chunk) {
			n := copy(dst, d.chunk[d.next:])
			d.next += n
			dst = dst[n:]
			continue
		}
		size := int(min(d.left, ChunkWords))
		if len(dst) >= size {
			d.decodeChunk(dst[:size])
			dst = dst[size:]
			continue
		}
		if cap(d.chunk) < ChunkWords {
			d.chunk = make([]uint64, ChunkWords)
		}
		d.chunk, d.next = d.chunk[:size], 0
		d.decodeChunk(d.chunk)
	}
	if d.err == nil && d.wordsLeft() == 0 {
		return d.finish()
	}
	return d.err
}

// wordsLeft returns the words not yet returned by ReadWords.
func (d *GenDecoder) wordsLeft() uint64 {
	n := d.left + uint64(len(d.chunk)-d.next)
	if d.section < len(d.hdr.Sections) {
		n += sum(d.hdr.Sections[d.section+1:])
	}
	return n
}

// decodeChunk decodes the next chunk of the current section, len(dst) words, into dst, folds it
// into the checksum and moves to the next section when it was the section's last.
func (d *GenDecoder) decodeChunk(dst []uint64) {
	d.err = d.chunkRecord(dst)
	if d.err != nil {
		return
	}
	d.crc = crc32.Update(d.crc, castagnoli, crcBytes(dst, &d.scratch))
	d.left -= uint64(len(dst))
	if d.left > 0 {
		return
	}
	if d.run > 0 {
		d.err = corruptf("a run of empty chunks goes past the end of section %d", d.section)
		return
	}
	if d.section++; d.section < len(d.hdr.Sections) {
		d.left = d.hdr.Sections[d.section]
	}
}

// chunkRecord reads the record of one chunk (or takes it from the current run of empty chunks).
func (d *GenDecoder) chunkRecord(dst []uint64) error {
	if d.run > 0 {
		d.run--
		clear(dst)
		return nil
	}
	mode, err := d.r.ReadByte()
	if err != nil {
		return readErr(err, "chunk record", d.n)
	}
	d.n++
	switch {
	case mode == modeEmpty:
		c, err := d.uvarint("empty run")
		if err != nil {
			return err
		}
		if chunks := (d.left + ChunkWords - 1) / ChunkWords; c == 0 || c > chunks {
			return corruptf("run of %d empty chunks at byte %d, %d chunks left in the section", c, d.n, chunks)
		}
		d.run = c - 1
		clear(dst)
		return nil
	case mode == modeRaw:
		return d.rawChunk(dst)
	case mode < modeRice+maxRiceK+1:
		return d.riceChunk(dst, int(mode-modeRice))
	}
	return corruptf("unknown chunk mode %d at byte %d", mode, d.n)
}

func (d *GenDecoder) uvarint(what string) (uint64, error) {
	br := &countingByteReader{d: d}
	v, err := binary.ReadUvarint(br)
	switch {
	case err == nil:
		return v, nil
	case br.err != nil && !errors.Is(br.err, io.EOF):
		return 0, fmt.Errorf("snapshot: reading %s: %w", what, br.err)
	}
	return 0, corruptf("%s: bad or truncated count at byte %d", what, d.n)
}

// countingByteReader reads bytes from a GenDecoder's reader, counts them and keeps the reader's
// error.
type countingByteReader struct {
	d   *GenDecoder
	err error
}

func (c *countingByteReader) ReadByte() (byte, error) {
	b, err := c.d.r.ReadByte()
	if err != nil {
		c.err = err
		return 0, err
	}
	c.d.n++
	return b, nil
}

func (d *GenDecoder) rawChunk(dst []uint64) error {
	if raw := wordBytes(dst); raw != nil {
		n, err := io.ReadFull(d.r, raw)
		d.n += int64(n)
		if err != nil {
			return readErr(err, "raw chunk", d.n)
		}
		return nil
	}
	b := d.buffer(len(dst) * 8)
	n, err := io.ReadFull(d.r, b)
	d.n += int64(n)
	if err != nil {
		return readErr(err, "raw chunk", d.n)
	}
	getWords(dst, b)
	return nil
}

func (d *GenDecoder) buffer(n int) []byte {
	if cap(d.scratch) < n {
		d.scratch = make([]byte, n)
	}
	return d.scratch[:n]
}

func (d *GenDecoder) riceChunk(dst []uint64, k int) error {
	n, err := d.uvarint("rice set bits")
	if err != nil {
		return err
	}
	l, err := d.uvarint("rice stream length")
	if err != nil {
		return err
	}
	if n == 0 || n > uint64(len(dst)*64) || l == 0 || l >= uint64(len(dst)*8) {
		return corruptf("rice chunk of %d set bits in %d bytes at byte %d", n, l, d.n)
	}
	if cap(d.stream) < int(l)+ricePad {
		d.stream = make([]byte, ChunkWords*8+ricePad)
	}
	s := d.stream[:int(l)+ricePad]
	m, err := io.ReadFull(d.r, s[:l])
	d.n += int64(m)
	if err != nil {
		return readErr(err, "rice chunk", d.n)
	}
	clear(s[l:])
	clear(dst)
	if err := riceDecode(dst, s, int(l), int(n), k); err != nil {
		return corruptf("rice chunk at byte %d: %v", d.n, err)
	}
	return nil
}

// finish verifies the trailing checksum and that nothing follows it, once.
func (d *GenDecoder) finish() error {
	if d.done {
		return d.finErr
	}
	d.done = true
	var c [4]byte
	n, err := io.ReadFull(d.r, c[:])
	d.n += int64(n)
	switch {
	case err != nil:
		d.finErr = readErr(err, "generation object checksum", d.n)
	case binary.LittleEndian.Uint32(c[:]) != d.crc:
		d.finErr = corruptf("generation object checksum mismatch (stored %08x, computed %08x)", binary.LittleEndian.Uint32(c[:]), d.crc)
	default:
		if _, err := d.r.ReadByte(); err == nil {
			d.finErr = corruptf("trailing bytes after the generation object's checksum at byte %d", d.n)
		} else if !errors.Is(err, io.EOF) {
			d.finErr = fmt.Errorf("snapshot: reading past the checksum: %w", err)
		}
	}
	if d.finErr == nil && d.avail >= 0 && d.n != d.avail {
		d.finErr = corruptf("generation object is %d bytes, its data ends at byte %d", d.avail, d.n)
	}
	d.err = d.finErr
	return d.finErr
}

// Verify decodes whatever has not been read yet, then checks the trailing checksum and that
// nothing follows it. It returns nil only if the whole object is intact.
func (d *GenDecoder) Verify() error {
	if _, err := d.Header(); err != nil {
		return err
	}
	buf := make([]uint64, 0, ChunkWords)
	for d.err == nil && d.wordsLeft() > 0 {
		if err := d.ReadWords(buf[:min(d.wordsLeft(), ChunkWords)]); err != nil {
			return err
		}
	}
	if d.err != nil {
		return d.err
	}
	return d.finish()
}

// Checksum returns the trailing checksum the object was verified against (valid once ReadWords
// returned the last word, or Verify returned nil): what a manifest's reference must record.
func (d *GenDecoder) Checksum() uint32 { return d.crc }
