package kafkaio

import "sync/atomic"

// Input memory. The buffers of a FetchPool's readers and brokers (each broker's response frames,
// which its partitions' answers are decoded in and hold until their readers are done with them,
// the readers' own copies of answers that waited long (PartitionReader.hand), and their free
// buffers) are counted in one inputAccount: all of them, and those in use (not free for reuse).
// With FetchPoolConfig.MaxBufferedBytes set, the pool bounds them:
//   - each request asks for at most what the buffers in use leave free of half the limit, and a
//     quarter of the limit (requestMaxBytes): a response stays in use until the last of its
//     partitions' readers is done with it, so responses already in use can hold about twice
//     what they were asked for; and at least minRequestBytes so that the pool always makes
//     progress: a broker sends the first batch of a partition whole even when it is over the
//     request's size (KIP-74);
//   - a partition whose reader still holds an answer has no fetch waiting and is left out of the
//     next request (see FetchPool);
//   - while all the buffers reach the limit, given-back buffers are dropped instead of kept, but
//     one per pool (the largest), which the next response is read into rather than into a fresh
//     allocation (cleared and faulted in while the dropped one waits for the garbage collector).
// The pool may go over the limit by one request's minimum, one batch and that one free buffer
// per broker, and the Go heap holds dropped buffers until its next collection.

// minRequestBytes is the least a pool's request asks for when its input memory is at its limit.
const minRequestBytes = 256 << 10

// inputAccount counts the bytes of the input buffers of one FetchPool. It is safe for
// concurrent use; a nil account counts nothing.
type inputAccount struct {
	total atomic.Int64 // every buffer made and not dropped
	inUse atomic.Int64 // the buffers handed out and not given back
	limit int64        // 0: none
}

// alloc counts n more bytes of buffers made (fewer, dropped, when n is negative); a buffer
// made is in use.
func (a *inputAccount) alloc(n int) {
	if a != nil {
		a.total.Add(int64(n))
		if n > 0 {
			a.inUse.Add(int64(n))
		}
	}
}

// use counts n more bytes of buffers in use (fewer, given back, when n is negative).
func (a *inputAccount) use(n int) {
	if a != nil {
		a.inUse.Add(int64(n))
	}
}

// over reports whether the buffers, free or in use, take the limit or more.
func (a *inputAccount) over() bool {
	return a != nil && a.limit > 0 && a.total.Load() >= a.limit
}

// requestMaxBytes returns the size limit of the pool's next request: at most MaxBytes and, with
// a limit, what the buffers in use leave free of half the limit and a quarter of the limit; at
// least minRequestBytes (see "Input memory").
func (p *FetchPool) requestMaxBytes() int32 {
	return int32(max(p.acct.requestBytes(p.cfg.MaxBytes), min(minRequestBytes, p.cfg.MaxBytes)))
}

// requestBytes returns how much the next request may ask for, at most max: what the buffers in
// use leave of half the limit (0 when none), at most a quarter of the limit; max when the account
// has no limit. A response stays in use until the last of its partitions' readers gives its
// answer back, so a slow partition keeps a whole response: requests sized to the whole limit
// kept 54 MiB in use against 32 at 96 partitions, this 23-24.
func (a *inputAccount) requestBytes(max int) int {
	if a == nil || a.limit <= 0 {
		return max
	}
	return int(min(int64(max), a.limit/requestShares, a.limit/2-min(a.inUse.Load(), a.limit/2)))
}

// requestShares is the largest part of the limit one request asks for: a quarter, so that the
// responses of several requests are in use at once within half of it.
const requestShares = 4

// MaxRequestBytes returns the most one request of a FetchPool whose MaxBufferedBytes is limit
// asks for (a quarter of it; 0 for no limit): the largest buffer the pool makes at once, a
// response frame, apart from a batch over that size, which a broker sends whole.
func MaxRequestBytes(limit int64) int64 {
	return max(limit, 0) / requestShares
}

// BufferedBytes returns the bytes the pool's input buffers hold: its brokers' response frames
// and its readers' answers, in use or free for reuse. It is safe for concurrent use.
func (p *FetchPool) BufferedBytes() int64 {
	return p.acct.total.Load()
}
