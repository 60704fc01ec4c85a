package snapshot

import (
	"bufio"
	"io"
	"sync"
)

// bufSize is the size of the encoders' and decoders' buffers: a file written or read in 64 KiB
// system calls costs no more CPU than in larger ones.
const bufSize = 64 << 10

// writers holds the encoders' write buffers: a checkpoint round of a topic with many partitions
// encodes a generation object and a manifest per partition, and a fresh 64 KiB buffer each was
// most of what the round allocated.
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, bufSize) }}

// getWriter returns a pooled buffer writing to w.
func getWriter(w io.Writer) *bufio.Writer {
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(w)
	return bw
}

// putWriter returns bw to the pool, dropping what it holds and its writer.
func putWriter(bw *bufio.Writer) {
	bw.Reset(nil)
	writers.Put(bw)
}

// readerSize returns the buffer size for a decoder of avail bytes (-1 when unknown): bufSize, or
// avail when smaller (a manifest read back from memory is a few KiB), at least bufio's minimum.
func readerSize(avail int64) int {
	if avail >= 0 && avail < bufSize {
		return max(int(avail), 16)
	}
	return bufSize
}
