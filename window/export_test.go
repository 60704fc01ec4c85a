package window

import (
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"sync/atomic"
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

// Snapshot calls fn with the Meta of the filter's current state and a function that writes the
// bit data that Meta describes, as WriteSnapshot does. Rotation waits until writeData returns (or
// fn, if it never calls writeData), so a caller can write its own header from the Meta before the
// data and still get a consistent pair, and can go on after the data (wait for acknowledgements,
// say) while the filter rotates again: under event time the goroutine that adds keys also
// rotates, and must not wait for what fn waits for. writeData may be called once, from fn's
// goroutine; fn must not call, before writeData returns, other methods of f that rotate or
// snapshot. Snapshot returns fn's error.
func (f *Filter) Snapshot(fn func(m Meta, writeData func(io.Writer) (int64, error)) error) error {
	defer runtime.KeepAlive(f) // its stage 0 is unmapped when it is collected (newFilter)
	f.mu.Lock()
	locked := true
	release := func() {
		if locked {
			f.snapStages = nil
			locked = false
			f.mu.Unlock()
		}
	}
	defer release()
	writeData := func(w io.Writer) (int64, error) {
		if !locked {
			return 0, errors.New("window: snapshot data written twice")
		}
		defer release()
		return f.writeWordsLocked(w)
	}
	return fn(f.metaLocked(), writeData)
}

func (f *Filter) writeWordsLocked(w io.Writer) (int64, error) {
	buf := make([]byte, snapshotChunk*8)
	var written int64
	for i := 0; i < len(f.words); i += snapshotChunk {
		end := min(i+snapshotChunk, len(f.words))
		b := buf[:(end-i)*8]
		for j := i; j < end; j++ {
			binary.LittleEndian.PutUint64(b[(j-i)*8:], atomic.LoadUint64(&f.words[j]))
		}
		n, err := w.Write(b)
		written += int64(n)
		if err != nil {
			return written, err
		}
	}
	for _, st := range f.snapStages {
		n, err := writeStageWords(w, st.words, buf)
		written += n
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// writeStageWords writes a grown stage's words as writeWordsLocked writes stage 0's.
func writeStageWords(w io.Writer, words []uint64, buf []byte) (int64, error) {
	var written int64
	for i := 0; i < len(words); i += snapshotChunk {
		end := min(i+snapshotChunk, len(words))
		b := buf[:(end-i)*8]
		for j := i; j < end; j++ {
			binary.LittleEndian.PutUint64(b[(j-i)*8:], atomic.LoadUint64(&words[j]))
		}
		n, err := w.Write(b)
		written += int64(n)
		if err != nil {
			return written, err
		}
	}
	return written, nil
}
