package snapshot

import (
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
