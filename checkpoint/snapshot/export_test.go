package snapshot

import (
	"encoding/binary"
	"fmt"
	"io"
)

// What only the tests use: whole single-file snapshots decoded in one call (the product reads
// manifests and generation objects through Decoder).

// Decode reads a whole snapshot from r. After the header has been read and
// validated, Decode calls dst with it; dst returns the destination for the
// data, which must hold exactly h.Words words (dst allocates it, so the
// decoder never holds a second copy), or a nil slice to verify the data
// without keeping it. Decode then reads the data straight into that slice
// and verifies the trailing checksum.
//
// On success it returns the header. On failure the destination's contents
// are unspecified and must be discarded; the error wraps ErrCorrupt,
// ErrNotSnapshot, ErrUnknownVersion, the error returned by dst, or the
// reader's error. The returned Header is the zero Header if the header
// itself could not be read.
func Decode(r io.Reader, dst func(h Header) ([]uint64, error)) (Header, error) {
	d := NewDecoder(r)
	h, err := d.Header()
	if err != nil {
		return h, err
	}
	words, err := dst(h)
	if err != nil {
		return h, fmt.Errorf("snapshot: destination: %w", err)
	}
	if words != nil {
		if uint64(len(words)) != h.DataBytes()/8 {
			return h, fmt.Errorf("snapshot: destination holds %d words, the file holds %d", len(words), h.DataBytes()/8)
		}
		if err := d.ReadWords(words); err != nil {
			return h, err
		}
	}
	return h, d.Verify()
}

// DecodeHeader reads and validates only the header of the snapshot in r
// (including its checksum, but not the data's). It reads at most the header
// plus one 64 KiB buffer, whatever the data size. Errors are those of
// Decoder.Header.
func DecodeHeader(r io.Reader) (Header, error) {
	return NewDecoder(r).Header()
}

// NewDecoder returns a Decoder reading a snapshot from r, which must be
// positioned at the start of the snapshot. If r is an io.Seeker that also
// reports its size (a Size() int64 or Stat() method, as *os.File,
// *bytes.Reader and *strings.Reader have), the decoder checks the data
// length the header implies against the bytes really available before the
// caller allocates anything. NewDecoder itself does not read.
func NewDecoder(r io.Reader) *Decoder {
	return newDecoder(r, availableBytes(r), false)
}

// ReadWords fills dst with the next len(dst) data words, reading large
// chunks: on little-endian hosts straight into dst's memory, elsewhere
// through a scratch buffer and a bulk conversion. A restorer normally calls it once with
// a slice of Header().Words words it allocated itself. When the call
// consumes the last word it also verifies the trailing checksum and returns
// an error wrapping ErrCorrupt on mismatch, in which case dst must be
// discarded. It fails without reading if dst is longer than the data left.
func (d *Decoder) ReadWords(dst []uint64) error {
	if _, err := d.Header(); err != nil {
		return err
	}
	if d.err != nil {
		return d.err
	}
	if uint64(len(dst)) > d.remaining/8 {
		return fmt.Errorf("snapshot: ReadWords of %d words, but only %d bytes of data are left", len(dst), d.remaining)
	}
	if raw := wordBytes(dst); raw != nil {
		// Little-endian host: read straight into the destination, a chunk
		// at a time so the CRC runs over bytes still in cache.
		for len(raw) > 0 {
			n := min(len(raw), wordChunk*8)
			if err := d.readData(raw[:n]); err != nil {
				return err
			}
			raw = raw[n:]
		}
	} else {
		for len(dst) > 0 {
			n := min(len(dst), wordChunk)
			b := d.buffer(n * 8)
			if err := d.readData(b); err != nil {
				return err
			}
			getWords(dst[:n], b)
			dst = dst[n:]
		}
	}
	if d.remaining == 0 {
		return d.finish()
	}
	return nil
}

// WriteWords writes words to w as little-endian uint64 values in 256 KiB
// chunks: on little-endian hosts straight from the slice's memory, elsewhere
// through a bulk conversion into one scratch buffer. It is the natural body
// of Encode's data function for a caller holding a []uint64. It returns the
// first error from w; w must not retain the slices it is given (as io.Writer
// requires).
func WriteWords(w io.Writer, words []uint64) error {
	if raw := wordBytes(words); raw != nil {
		for len(raw) > 0 {
			n := min(len(raw), wordChunk*8)
			if _, err := w.Write(raw[:n]); err != nil {
				return err
			}
			raw = raw[n:]
		}
		return nil
	}
	buf := make([]byte, min(len(words), wordChunk)*8)
	for len(words) > 0 {
		n := min(len(words), wordChunk)
		b := buf[:n*8]
		putWords(b, words[:n])
		if _, err := w.Write(b); err != nil {
			return err
		}
		words = words[n:]
	}
	return nil
}

// putWords stores src into dst (len(dst) >= 8*len(src)) little-endian, four
// words per step so the compiler drops the bounds checks.
func putWords(dst []byte, src []uint64) {
	for len(src) >= 4 && len(dst) >= 32 {
		d, s := dst[:32:32], src[:4:4]
		binary.LittleEndian.PutUint64(d[0:8], s[0])
		binary.LittleEndian.PutUint64(d[8:16], s[1])
		binary.LittleEndian.PutUint64(d[16:24], s[2])
		binary.LittleEndian.PutUint64(d[24:32], s[3])
		dst, src = dst[32:], src[4:]
	}
	for i, v := range src {
		binary.LittleEndian.PutUint64(dst[i*8:], v)
	}
}

// Encode writes a snapshot in the SingleFileVersion format to w: the header h,
// then the bit data produced by data, then the checksum. data must write
// exactly h.Words×8 bytes (the words in little-endian order); it is called once, and everything it writes is streamed to w
// through a buffer while the CRC is computed on the fly, so the data is never
// held twice. Encode flushes its buffer before returning.
//
// Encode is safe for concurrent use on different writers. On failure the
// returned error wraps ErrInvalidHeader (nothing was written), the error
// returned by data, or the error from w; in the last two cases w has
// received a partial, unusable snapshot, which is why the checkpoint stores
// make an object visible only once it is complete.
func Encode(w io.Writer, h Header, data func(w io.Writer) error) error {
	return encode(w, &h, SingleFileVersion, data)
}

// SingleFileVersion is the version Encode writes: the newest format of a snapshot that holds its
// data itself, which kdedup wrote before manifests and still reads.
const SingleFileVersion = VersionV5
