package window

import (
	"io"
	"runtime"
)

// Sizing returns the layout the filter was built with.
func (f *Filter) Sizing() Sizing { return f.sizing }

// Config returns the configuration the filter was built with, with defaults filled in.
func (f *Filter) Config() Config { return f.cfg }

// What only the tests use of a Filter: the whole bit data to one writer (the single-file
// snapshots of version 5 and earlier; the product writes generations through SnapshotGenerations).

// WriteSnapshot writes the filter's bit data to w as Meta.Words little-endian 64-bit words and
// returns the Meta that describes them and the number of bytes written. It runs while writers
// continue: every word is read atomically, so the copy is consistent per word, and a key added
// during the copy may or may not be in it (a Bloom filter tolerates both). Every key added before
// WriteSnapshot was called is in the copy. Rotation and sweeping wait until the copy ends, so the
// slot uses in Meta hold for every word copied.
//
// On a write error it returns the error from w and the bytes written so far.
func (f *Filter) WriteSnapshot(w io.Writer) (Meta, int64, error) {
	defer runtime.KeepAlive(f) // its stage 0 is unmapped when it is collected (newFilter)
	var meta Meta
	var n int64
	err := f.Snapshot(func(m Meta, writeData func(io.Writer) (int64, error)) error {
		meta = m
		var err error
		n, err = writeData(w)
		return err
	})
	return meta, n, err
}
