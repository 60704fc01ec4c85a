// Package snapshottest holds what the tests of other packages need to write and read the bit data
// of snapshots (checkpoint/snapshot) without the product exporting it: the product reads data
// through the snapshot.Decoder as an io.Reader (window.Restore) and writes none itself since the
// generation objects of version 6 (GenEncoder writes those). Only tests import this package.
package snapshottest

import (
	"encoding/binary"
	"io"
)

// WriteWords writes words to w as the snapshot format stores data: little-endian uint64 values.
// It returns the first error from w.
func WriteWords(w io.Writer, words []uint64) error {
	buf := make([]byte, 0, 8*min(len(words), 8<<10))
	for len(words) > 0 {
		n := min(len(words), cap(buf)/8)
		buf = buf[:0]
		for _, v := range words[:n] {
			buf = binary.LittleEndian.AppendUint64(buf, v)
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
		words = words[n:]
	}
	return nil
}

// ReadWords fills dst with the next len(dst) little-endian words of r (a snapshot.Decoder
// positioned at its data, say). A Decoder verifies the trailing checksum when its last data byte
// is read, but io.ReadFull drops that error once it has the bytes: call Decoder.Verify (as
// checkpoint.Load does) before trusting dst.
func ReadWords(r io.Reader, dst []uint64) error {
	buf := make([]byte, 8*min(len(dst), 8<<10))
	for len(dst) > 0 {
		n := min(len(dst), len(buf)/8)
		if _, err := io.ReadFull(r, buf[:8*n]); err != nil {
			return err
		}
		for i := range n {
			dst[i] = binary.LittleEndian.Uint64(buf[8*i:])
		}
		dst = dst[n:]
	}
	return nil
}
