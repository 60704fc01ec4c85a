package consumer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// offsetCommitter commits the offsets of the committer's topic, per partition, in one
// generation: groupCommits in production.
type offsetCommitter interface {
	commitOffsets(offsets map[int]kafkaio.Committed) error
}

// errCommitterStopped is returned to flush callers still waiting when the committer stops.
var errCommitterStopped = errors.New("consumer: committer stopped before the offset was committed")

// committer funnels every offset commit through one goroutine, so that a partition's commits
// never overtake each other. It commits in one generation at a time: under the cooperative
// protocol it outlives generations, and switchTo moves it, with the partitions that stay, to the
// next one (pause holds the commits while the member rejoins). Partition
// goroutines hand it the next offset to commit after each acknowledged batch (mark) and, when a
// partition is revoked, wait for their last offset to be committed (flush). Pending offsets are
// coalesced, so at most one commit request is in flight. Its methods are safe for concurrent use.
type committer struct {
	topic    string
	interval time.Duration
	obs      Observer
	log      *kafkaio.Sampler

	kick chan struct{} // capacity 1: "commit soon"
	stop chan struct{}
	done chan struct{}

	mu sync.Mutex
	// gen commits in the current generation; own is its ownership, told of every commit's
	// answer (nil in tests). Set before run, then by switchTo.
	gen       offsetCommitter
	own       *ownership
	paused    bool          // commits wait for switchTo or resume (see pause)
	pending   map[int]int64 // acknowledged, not yet committed: next offset per partition
	committed map[int]int64
	rewinds   map[int]int // per partition: how often its offset moved backward (rewind)
	epochs    map[int]epochAt
	waiters   []commitWaiter
}

// epochAt is the leader epoch of the last record before next, as readAt was told.
type epochAt struct {
	next  int64
	epoch int32
}

type commitWaiter struct {
	partition int
	offset    int64
	ch        chan error // capacity 1
}

func newCommitter(gen offsetCommitter, topic string, interval time.Duration, obs Observer, log *kafkaio.Sampler) *committer {
	return &committer{
		gen: gen, topic: topic, interval: interval, obs: obs, log: log,
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		pending:   make(map[int]int64),
		committed: make(map[int]int64),
		rewinds:   make(map[int]int),
		epochs:    make(map[int]epochAt),
	}
}

// switchTo makes gen, whose ownership is own, the generation of every later commit, and ends a
// pause: offsets pending or refused in the previous generation are committed in this one.
func (c *committer) switchTo(gen offsetCommitter, own *ownership) {
	c.mu.Lock()
	c.gen, c.own, c.paused = gen, own, false
	c.mu.Unlock()
	c.wake()
}

// pause holds the commits (they stay pending, flush waits) until switchTo or resume: while the
// member rejoins its group under the cooperative protocol, a commit in the old generation would
// be refused once the coordinator moved on (ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS).
func (c *committer) pause() {
	c.mu.Lock()
	c.paused = true
	c.mu.Unlock()
}

// resume ends a pause in the same generation (the rejoin failed, or the partitions are given up).
func (c *committer) resume() {
	c.mu.Lock()
	c.paused = false
	c.mu.Unlock()
	c.wake()
}

// ownership returns the ownership of the current generation (nil in tests).
func (c *committer) ownership() *ownership {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.own
}

// readAt records that the record of partition before offset next was read in leader epoch epoch
// (kafkaio.Batch.Epoch): a commit of next carries it (KIP-320); a commit of another offset
// carries -1, no epoch. It never blocks.
func (c *committer) readAt(partition int, next int64, epoch int32) {
	c.mu.Lock()
	c.epochs[partition] = epochAt{next: next, epoch: epoch}
	c.mu.Unlock()
}

// mark records that every input record of partition before offset next was handled (produced and
// acknowledged, or dropped). It never blocks.
func (c *committer) mark(partition int, next int64) {
	c.mu.Lock()
	if next > c.pending[partition] && next > c.committed[partition] {
		c.pending[partition] = next
	}
	c.mu.Unlock()
	if c.interval <= 0 {
		c.wake()
	}
}

// rewind records that partition is read again from next, below what was marked or committed (an
// offset reset after the log was truncated or the topic re-created): next is committed although
// it is lower, so that the partition's next owner does not skip the records from next on, and
// marks go on from it. A commit in flight with the higher offset does not count as committed
// when it returns; next is committed after it. It never blocks.
func (c *committer) rewind(partition int, next int64) {
	c.mu.Lock()
	c.pending[partition] = next
	delete(c.committed, partition)
	c.rewinds[partition]++
	c.mu.Unlock()
	c.wake()
}

// flush marks next for partition and waits until it is committed. It returns the commit error
// (a failed commit is not retried by flush) or ctx's error.
func (c *committer) flush(ctx context.Context, partition int, next int64) error {
	w := commitWaiter{partition: partition, offset: next, ch: make(chan error, 1)}
	c.mu.Lock()
	if c.committed[partition] >= next {
		c.mu.Unlock()
		return nil
	}
	if next > c.pending[partition] {
		c.pending[partition] = next
	}
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()
	c.wake()
	select {
	case err := <-w.ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *committer) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// run commits until close is called, then commits what is pending once more and returns.
func (c *committer) run() {
	defer close(c.done)
	var tick <-chan time.Time
	if c.interval > 0 {
		t := time.NewTicker(c.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-c.stop:
			c.commitOnce()
			c.mu.Lock()
			for _, w := range c.waiters {
				w.ch <- errCommitterStopped
			}
			c.waiters = nil
			c.mu.Unlock()
			return
		case <-c.kick:
		case <-tick:
		}
		c.commitOnce()
	}
}

// owned returns an error wrapping ErrNotOwner if the generation was lost (see ownership.check),
// and nil otherwise, also when ownership cannot be confirmed now: a process that resumes after a
// pause past its session learns here, before it writes the batch in hand, that its partitions
// moved, and gives them up unwritten (the new owner consumes them again). It is not a fence: the
// generation can be lost right after the check.
func (c *committer) owned(ctx context.Context) error {
	own := c.ownership()
	if own == nil {
		return nil
	}
	if err := own.check(ctx); errors.Is(err, ErrNotOwner) {
		return err
	}
	return nil
}

// close stops run and waits for it to return.
func (c *committer) close() {
	c.resume()
	close(c.stop)
	<-c.done
}

func (c *committer) commitOnce() {
	c.mu.Lock()
	if len(c.pending) == 0 || c.paused {
		c.mu.Unlock()
		return
	}
	gen, own := c.gen, c.own
	offsets := c.pending
	c.pending = make(map[int]int64, len(offsets))
	rewinds := make(map[int]int, len(offsets))
	commits := make(map[int]kafkaio.Committed, len(offsets))
	for p, o := range offsets {
		rewinds[p] = c.rewinds[p]
		commits[p] = kafkaio.Committed{Offset: o, LeaderEpoch: -1}
		if e := c.epochs[p]; e.next == o {
			commits[p] = kafkaio.Committed{Offset: o, LeaderEpoch: e.epoch}
		}
	}
	c.mu.Unlock()

	start := time.Now()
	err := gen.commitOffsets(commits)
	if own != nil && err == nil {
		own.confirm(start)
	}
	if own != nil && own.fence(err) && own == c.ownership() {
		c.log.Log(slog.LevelWarn, "generation-lost", "offset commit refused: the consumer group generation was lost; "+
			"its partitions are released without saving their state", "topic", c.topic, "error", err.Error())
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.obs.CommitError()
		c.log.Log(slog.LevelWarn, "commit-failed", "offset commit failed; records after the last committed offset will be re-consumed",
			"topic", c.topic, "error", err.Error())
	}
	for p, o := range offsets {
		switch {
		case c.rewinds[p] != rewinds[p]: // rewound while in flight: the lower offset is pending
		case err != nil && o > c.pending[p]:
			c.pending[p] = o
		case err == nil && o > c.committed[p]:
			c.committed[p] = o
		}
	}
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		switch {
		case c.committed[w.partition] >= w.offset:
			w.ch <- nil
		case err != nil:
			w.ch <- err
		default:
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}
