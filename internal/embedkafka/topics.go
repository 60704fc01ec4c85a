package embedkafka

import (
	"context"
	"fmt"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// Topics are the topic helpers of a cluster over a client and producer of it: Cluster's, and
// those a test helper puts over a cluster that this process did not start (testbroker's real
// Kafka). They are safe for concurrent use.
type Topics struct {
	conns       func() (*kafkaio.Client, *kafkaio.Producer)
	replication int // of the topics CreateTopic creates
}

// NewTopics returns the topic helpers over the client and producer that conns returns when
// called (a cluster that restarts replaces them); CreateTopic gives new topics replication copies
// of each partition.
func NewTopics(conns func() (*kafkaio.Client, *kafkaio.Producer), replication int) Topics {
	return Topics{conns: conns, replication: replication}
}

// Client returns a kafka-go client for the cluster (see kafkaio.Conn.Client), safe for
// concurrent use, whose requests time out after 10s. A Cluster's client is replaced on every
// start: pooled connections do not survive a restart.
func (t Topics) Client() *kafkaio.Client {
	c, _ := t.conns()
	return c
}

// CreateTopic creates a topic with the given number of partitions, replicated as the cluster
// says (once on a Cluster, which has no replication), and returns once every partition has a
// leader: a real broker answers CreateTopics before its leaders are known, and a produce right
// after it fails with NOT_LEADER_OR_FOLLOWER.
func (t Topics) CreateTopic(ctx context.Context, name string, partitions int) error {
	if err := kafkaio.CreateTopic(ctx, t.Client(), name, partitions, t.replication); err != nil {
		return fmt.Errorf("embedkafka: %w", err)
	}
	return t.WaitLeaders(ctx, name)
}

// WaitLeaders waits, for up to 30s, until every partition of topic has a leader in the
// cluster's metadata.
func (t Topics) WaitLeaders(ctx context.Context, topic string) error {
	err := kafkaio.Backoff{Min: 20 * time.Millisecond, Max: 500 * time.Millisecond}.Retry(ctx, 100, func(int) error {
		return kafkaio.LeadersKnown(ctx, t.Client(), topic)
	})
	if err != nil {
		return fmt.Errorf("embedkafka: %w", err)
	}
	return nil
}

// SetTopicConfig sets configs (name → value, such as "max.message.bytes") of topic; settings it
// does not name keep their values.
func (t Topics) SetTopicConfig(ctx context.Context, topic string, configs map[string]string) error {
	if err := kafkaio.AlterTopicConfig(ctx, t.Client(), topic, configs); err != nil {
		return fmt.Errorf("embedkafka: %w", err)
	}
	return nil
}

// Partitions returns the number of partitions of topic.
func (t Topics) Partitions(ctx context.Context, topic string) (int, error) {
	return kafkaio.PartitionCount(ctx, t.Client(), topic)
}

// Produce writes msgs, in order, to topic/partition with acks=all (see kafkaio.Producer: requests
// of at most kafkaio.DefaultBatchBytes, no idempotence). Only Key, Value, Headers and Time of msgs
// are used. An answer that the partition has no leader here yet (a real broker just after the
// topic was created, or during a leader change) is retried for up to about 10 s: such a request
// was not appended, though requests before it in the same call were and are sent again.
func (t Topics) Produce(ctx context.Context, topic string, partition int, msgs ...kafkaio.Record) error {
	_, p := t.conns()
	err := kafkaio.Backoff{Min: 50 * time.Millisecond, Max: time.Second}.Retry(ctx, 15, func(int) error {
		err := p.Produce(ctx, topic, partition, msgs)
		if err != nil && !kafkaio.LeaderMoving(err) {
			return kafkaio.Permanent(err)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("embedkafka: %w", err)
	}
	return nil
}

// EndOffsets returns the high watermark of every partition of topic.
func (t Topics) EndOffsets(ctx context.Context, topic string) (map[int]int64, error) {
	n, err := t.Partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	_, end, err := kafkaio.TopicOffsets(ctx, t.Client(), topic, n)
	if err != nil {
		return nil, err
	}
	out := make(map[int]int64, n)
	for p, o := range end {
		out[p] = o
	}
	return out, nil
}

// Committed returns the offsets committed by group for every partition of topic; a partition
// without a committed offset (or a group that does not exist yet) maps to -1.
func (t Topics) Committed(ctx context.Context, group, topic string) (map[int]int64, error) {
	n, err := t.Partitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	ps := make([]int, n)
	for p := range n {
		ps[p] = p
	}
	// A real broker answers for a group only once its coordinator is loaded (the first request
	// for any group creates __consumer_offsets): retry, for up to a minute, what says the
	// coordinator is not ready.
	var com map[int]kafkaio.Committed
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = kafkaio.Backoff{Max: time.Second}.Retry(rctx, 0, func(int) error {
		var err error
		com, err = kafkaio.CommittedOffsets(rctx, t.Client(), group, topic, ps)
		if err != nil && !kafkaio.CoordinatorLoading(err) {
			return kafkaio.Permanent(err)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("embedkafka: offset fetch: %w", err)
	}
	out := make(map[int]int64, len(com))
	for p, c := range com {
		out[p] = c.Offset
	}
	return out, nil
}
