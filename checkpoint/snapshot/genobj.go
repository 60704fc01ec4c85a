package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
	"slices"
)

// GenMagic is the 8-byte signature every generation object starts with.
const GenMagic = "KDDPGENR"

// MaxSections bounds the sections of a generation object: stage 0 and at most MaxStages grown
// stages.
const MaxSections = MaxStages + 1

// GenHeader describes a generation object: the words of one generation of a filter, in the
// canonical form the filter exports (see GenDecoder), which a manifest references.
type GenHeader struct {
	// Version is the format version the object was read from. The decoder sets it; the encoder
	// ignores it and writes VersionV6.
	Version uint16
	// Generation is the number of the generation the object holds.
	Generation uint64
	// Sections holds the number of words of each section, in order: the generation's stage 0
	// (its block in every group), then each of its grown stages in the order of the manifest's
	// stage table.
	Sections []uint64
}

// Words returns the total number of words of the object's sections.
func (h *GenHeader) Words() uint64 {
	var n uint64
	for _, s := range h.Sections {
		n += s
	}
	return n
}

func (h *GenHeader) check() error {
	if len(h.Sections) == 0 || len(h.Sections) > MaxSections {
		return fmt.Errorf("%d sections, want 1 to %d", len(h.Sections), MaxSections)
	}
	var total uint64
	for i, s := range h.Sections {
		if s == 0 || s > MaxDataBytes/8 {
			return fmt.Errorf("section %d has %d words, want 1 to %d", i, s, uint64(MaxDataBytes/8))
		}
		if total += s; total > MaxDataBytes/8 {
			return fmt.Errorf("sections exceed %d data bytes", uint64(MaxDataBytes))
		}
	}
	return nil
}

func (h *GenHeader) appendBody(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, h.Generation)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h.Sections)))
	for _, s := range h.Sections {
		b = binary.LittleEndian.AppendUint64(b, s)
	}
	return b
}

// GenEncoder writes one generation object. Create it with NewGenEncoder, pass every word of every
// section in order to WriteWords, then call Close. It is not safe for concurrent use.
type GenEncoder struct {
	w       *bufio.Writer
	h       GenHeader
	crc     uint32 // over the header and the words written so far
	section int
	left    uint64 // words left in the current section
	pending []uint64
	empty   uint64 // empty chunks not written yet
	chunk   chunkEncoder
	buf     []byte
	written int64
	err     error
}

// NewGenEncoder writes the header of a generation object to w and returns the encoder of its
// data. It fails, wrapping ErrInvalidHeader, for a header with no sections, an empty section or
// more than MaxDataBytes of data.
func NewGenEncoder(w io.Writer, h GenHeader) (*GenEncoder, error) {
	if err := h.check(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidHeader, err)
	}
	h.Sections = slices.Clone(h.Sections)
	head := make([]byte, preambleLen, preambleLen+12+8*len(h.Sections)+4)
	copy(head, GenMagic)
	binary.LittleEndian.PutUint16(head[8:], VersionV6)
	head = h.appendBody(head)
	binary.LittleEndian.PutUint32(head[10:], uint32(len(head)-preambleLen))
	crc := crc32.Checksum(head, castagnoli)
	head = binary.LittleEndian.AppendUint32(head, crc)
	e := &GenEncoder{w: getWriter(w), h: h, left: h.Sections[0]}
	e.crc = crc32.Update(crc, castagnoli, head[len(head)-4:])
	e.write(head)
	return e, e.err
}

func (e *GenEncoder) write(b []byte) {
	if e.err != nil {
		return
	}
	n, err := e.w.Write(b)
	e.written += int64(n)
	if err != nil {
		e.err = fmt.Errorf("snapshot: writing generation object: %w", err)
	}
}

// WriteWords encodes the next len(words) words of the object's data, which may span sections. It
// fails if words goes beyond the data the header declares, and returns the writer's error.
func (e *GenEncoder) WriteWords(words []uint64) error {
	for len(words) > 0 && e.err == nil {
		if e.left == 0 {
			return fmt.Errorf("snapshot: generation object: more words than the %d its header declares", e.h.Words())
		}
		n := int(min(uint64(len(words)), e.left))
		e.crc = crc32.Update(e.crc, castagnoli, crcBytes(words[:n], &e.buf))
		e.section1(words[:n])
		words = words[n:]
	}
	return e.err
}

// section1 encodes words of the current section (at most what is left of it).
func (e *GenEncoder) section1(words []uint64) {
	e.left -= uint64(len(words))
	if len(e.pending) > 0 {
		take := min(len(words), ChunkWords-len(e.pending))
		e.pending = append(e.pending, words[:take]...)
		words = words[take:]
		if len(e.pending) == ChunkWords || e.left == 0 && len(words) == 0 {
			e.chunk1(e.pending)
			e.pending = e.pending[:0]
		}
	}
	for len(words) >= ChunkWords || len(words) > 0 && e.left == 0 {
		n := min(len(words), ChunkWords)
		e.chunk1(words[:n])
		words = words[n:]
	}
	e.pending = append(e.pending, words...)
	if e.left == 0 {
		e.flushEmpty()
		if e.section++; e.section < len(e.h.Sections) {
			e.left = e.h.Sections[e.section]
		}
	}
}

// chunk1 encodes one chunk.
func (e *GenEncoder) chunk1(words []uint64) {
	ones := 0
	for _, w := range words {
		ones += bits.OnesCount64(w)
	}
	if ones == 0 {
		e.empty++
		return
	}
	e.flushEmpty()
	e.buf = e.chunk.encode(e.buf[:0], words, ones)
	e.write(e.buf)
}

func (e *GenEncoder) flushEmpty() {
	if e.empty == 0 {
		return
	}
	e.buf = binary.AppendUvarint(append(e.buf[:0], modeEmpty), e.empty)
	e.empty = 0
	e.write(e.buf)
}

// Close writes the trailing checksum and flushes. It fails if fewer words were written than the
// header declares. The object is complete only if Close returns nil.
func (e *GenEncoder) Close() error {
	if e.err != nil {
		return e.err
	}
	if e.section < len(e.h.Sections) {
		return fmt.Errorf("snapshot: generation object: %d words missing", e.left+sum(e.h.Sections[e.section+1:]))
	}
	var tail [4]byte
	binary.LittleEndian.PutUint32(tail[:], e.crc)
	e.write(tail[:])
	if e.err == nil {
		if err := e.w.Flush(); err != nil {
			e.err = fmt.Errorf("snapshot: writing generation object: %w", err)
		}
	}
	err := e.err
	if err == nil {
		e.err = errClosed
	}
	putWriter(e.w) // a failed write leaves e.err set: nothing writes to it again
	e.w = nil
	return err
}

// errClosed is the error of a GenEncoder used after Close.
var errClosed = errors.New("snapshot: generation object: encoder used after Close")

// Checksum returns the object's trailing checksum: what a manifest records to tie a reference to
// the object's content. It is valid after Close returned nil.
func (e *GenEncoder) Checksum() uint32 { return e.crc }

// Size returns the bytes written so far (the object's size after Close).
func (e *GenEncoder) Size() int64 { return e.written }

func sum(s []uint64) uint64 {
	var n uint64
	for _, v := range s {
		n += v
	}
	return n
}

// crcBytes returns words as little-endian bytes for the checksum: their own memory on
// little-endian hosts, else a conversion into *buf.
func crcBytes(words []uint64, buf *[]byte) []byte {
	if raw := wordBytes(words); raw != nil {
		return raw
	}
	*buf = (*buf)[:0]
	for _, w := range words {
		*buf = binary.LittleEndian.AppendUint64(*buf, w)
	}
	return *buf
}
