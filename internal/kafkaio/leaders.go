package kafkaio

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// leaderCache knows which broker leads each partition, from Metadata requests that name only the
// topics asked for: its own, or, with shared set, the requests its owner shares with other
// look-ups. The fetch pool and the producer route their per-broker requests with it. It is safe
// for concurrent use; the zero value is not: fill in client and timeout.
type leaderCache struct {
	client  *kafka.Client
	timeout time.Duration // bounds one Metadata request
	// shared, when not nil, answers a look-up instead of a Metadata request of the cache's own: a
	// fetch pool's readers share one request per topic for leaders and leader epochs, so that the
	// pool's metadata requests all run in its lookup slots (see FetchPool.Lookup).
	shared func(ctx context.Context, topic string) (*kmsg.MetadataResponse, error)

	mu      sync.Mutex // held while leaders are looked up
	leaders map[topicPartition]int32
}

// leader returns the broker leading tp, looking the topic's leaders up when it is not known.
func (c *leaderCache) leader(ctx context.Context, tp topicPartition) (int32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id, ok := c.leaders[tp]; ok {
		return id, nil
	}
	if err := c.lookup(ctx, tp.topic); err != nil {
		return -1, err
	}
	if id, ok := c.leaders[tp]; ok {
		return id, nil
	}
	return -1, fmt.Errorf("kafkaio: no leader known for %s/%d: %w", tp.topic, tp.partition, kafka.LeaderNotAvailable)
}

// lookup reads the leaders of topic's partitions from one Metadata request. c.mu is held.
func (c *leaderCache) lookup(ctx context.Context, topic string) error {
	if c.shared != nil {
		return c.lookupShared(ctx, topic)
	}
	mctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	md, err := c.client.Metadata(mctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return fmt.Errorf("kafkaio: looking up the leaders of topic %q: %w", topic, err)
	}
	if c.leaders == nil {
		c.leaders = map[topicPartition]int32{}
	}
	for _, t := range md.Topics {
		if t.Error != nil {
			return fmt.Errorf("kafkaio: looking up the leaders of topic %q: %w", topic, t.Error)
		}
		for _, pt := range t.Partitions {
			if pt.Error == nil && pt.Leader.ID >= 0 && pt.Leader.Host != "" {
				c.leaders[topicPartition{t.Name, pt.ID}] = int32(pt.Leader.ID)
			}
		}
	}
	return nil
}

// lookupShared reads the leaders of topic's partitions from c.shared. c.mu is held.
func (c *leaderCache) lookupShared(ctx context.Context, topic string) error {
	md, err := c.shared(ctx, topic)
	if err != nil {
		return fmt.Errorf("kafkaio: looking up the leaders of topic %q: %w", topic, err)
	}
	if c.leaders == nil {
		c.leaders = map[topicPartition]int32{}
	}
	for _, t := range md.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if t.ErrorCode != 0 {
			return fmt.Errorf("kafkaio: looking up the leaders of topic %q: %w", topic, kafka.Error(t.ErrorCode))
		}
		for _, pt := range t.Partitions {
			if pt.ErrorCode == 0 && pt.Leader >= 0 {
				c.leaders[topicPartition{topic, int(pt.Partition)}] = pt.Leader
			}
		}
	}
	return nil
}

// forget drops the leader known for tp, after a request to it failed: the next request looks it
// up.
func (c *leaderCache) forget(tp topicPartition) {
	c.mu.Lock()
	delete(c.leaders, tp)
	c.mu.Unlock()
}
