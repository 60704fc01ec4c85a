package kafkaio

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Shared leader look-ups. Every reader of a pool learns its partition's leader epoch before its
// first fetch (see "Leader epochs"), and the pool learns which broker leads it, and a Metadata
// request for one topic answers both for all of its partitions. So the readers of a pool that
// ask for the same topic at once share one request: on 1,000 partitions, one request instead of
// a thousand, each of which made the broker describe the whole topic (and held every other
// reader's first fetch behind it). The requests run in the pool's lookup slots, so a pool has at
// most lookupSlots metadata requests in flight, each on a connection of kafka-go's control pool.

// metaCall is one Metadata request for a topic that readers of the pool wait for. res and err are
// set before done is closed.
type metaCall struct {
	done chan struct{}
	res  *kmsg.MetadataResponse
	err  error
}

// leaderOf returns what the metadata says of topic/partition's leadership, as the package's
// leaderOf does, from a Metadata request sent after the call began: a reader that asks after an
// error that made its knowledge stale never gets an answer older than its question. The readers
// asking for a topic before that request was sent share it. It is safe for concurrent use; it
// returns ctx's error if ctx ends first, ErrPoolClosed once the pool is closed.
func (p *FetchPool) leaderOf(ctx context.Context, topic string, partition int32) (partitionLeader, error) {
	res, err := p.sharedMetadata(ctx, topic)
	if err != nil {
		return partitionLeader{}, err
	}
	return leaderIn(res, topic, partition)
}

// sharedMetadata returns the answer to a Metadata request for topic sent after the call began,
// shared with the other look-ups of the pool that asked before it was sent (see leaderOf). It is
// safe for concurrent use; it returns ctx's error if ctx ends first, ErrPoolClosed once the pool
// is closed.
func (p *FetchPool) sharedMetadata(ctx context.Context, topic string) (*kmsg.MetadataResponse, error) {
	c, err := p.metaCall(topic)
	if err != nil {
		return nil, err
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// metaCall returns the request for topic not yet sent, starting one when there is none.
func (p *FetchPool) metaCall(topic string) (*metaCall, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		return nil, ErrPoolClosed
	}
	if c := p.metaNext[topic]; c != nil {
		return c, nil
	}
	c := &metaCall{done: make(chan struct{})}
	if p.metaNext == nil {
		p.metaNext = map[string]*metaCall{}
	}
	p.metaNext[topic] = c
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(c.done)
		c.err = p.Lookup(p.ctx, func() error {
			p.mu.Lock()
			delete(p.metaNext, topic) // sent from now on: later questions need a later answer
			p.mu.Unlock()
			ctx, cancel := context.WithTimeout(p.ctx, p.leaders.timeout)
			defer cancel()
			var err error
			c.res, err = topicMetadata(ctx, p.client, p.clientID, topic)
			return err
		})
	}()
	return c, nil
}
