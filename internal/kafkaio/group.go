package kafkaio

import (
	"context"
	"time"

	"github.com/segmentio/kafka-go"
)

// Client is the kafka-go Client that carries kdedup's requests (made by Conn.Client). It is an
// alias so that the packages above this one hold and pass a Client without importing kafka-go;
// they call this package's functions with it, never its own methods.
type Client = kafka.Client

// PartitionOffsets are the first and end offsets of one partition, or the error that kept them
// from being listed (see ListOffsets).
type PartitionOffsets = kafka.PartitionOffsets

// ErrUnknownTopicOrPartition is the broker's UNKNOWN_TOPIC_OR_PARTITION error, as errors.Is sees
// it in a PartitionOffsets.Error or a request's error.
var ErrUnknownTopicOrPartition error = kafka.UnknownTopicOrPartition

// ErrGroupClosed is Group.Next's error once the group was closed.
var ErrGroupClosed = kafka.ErrGroupClosed

// GroupConfig configures a consumer group membership (see Conn.JoinGroup).
type GroupConfig struct {
	// ID is the group. Required.
	ID string
	// Topics are the topics whose partitions the group assigns. Required.
	Topics []string
	// HeartbeatInterval, SessionTimeout and RebalanceTimeout are the group's timeouts.
	HeartbeatInterval, SessionTimeout, RebalanceTimeout time.Duration
	// StartFromLatest starts a partition without committed offset at its end instead of its
	// beginning.
	StartFromLatest bool
	// Sticky, when not nil, is the preferred assignor; range, which every kdedup version
	// supports, is the one the group falls back to (a group that mixes versions during a rolling
	// upgrade agrees on it).
	Sticky *StickyBalancer
	// Log, when not nil, takes kafka-go's group log (see Sampler.KafkaLoggers) under the
	// component "kafka-group".
	Log *Sampler
}

// Group is a member of a consumer group: kafka-go's ConsumerGroup with c's connections. It
// rejoins after every rebalance, and watches the topics' partition counts. Next and Close are
// safe for concurrent use.
type Group struct{ cg *kafka.ConsumerGroup }

// JoinGroup returns a member of cfg.ID over c's connections (Conn.Dialer); Next joins. The error
// is a configuration error.
func (c Conn) JoinGroup(cfg GroupConfig) (*Group, error) {
	start := kafka.FirstOffset
	if cfg.StartFromLatest {
		start = kafka.LastOffset
	}
	gc := kafka.ConsumerGroupConfig{
		ID:                    cfg.ID,
		Brokers:               c.Brokers,
		Dialer:                c.Dialer(),
		Topics:                cfg.Topics,
		HeartbeatInterval:     cfg.HeartbeatInterval,
		SessionTimeout:        cfg.SessionTimeout,
		RebalanceTimeout:      cfg.RebalanceTimeout,
		JoinGroupBackoff:      time.Second,
		WatchPartitionChanges: true,
		GroupBalancers:        []kafka.GroupBalancer{kafka.RangeGroupBalancer{}},
		StartOffset:           start,
	}
	if cfg.Sticky != nil {
		gc.GroupBalancers = []kafka.GroupBalancer{cfg.Sticky, kafka.RangeGroupBalancer{}}
	}
	if cfg.Log != nil {
		gc.Logger, gc.ErrorLogger = cfg.Log.KafkaLoggers("kafka-group")
	}
	cg, err := kafka.NewConsumerGroup(gc)
	if err != nil {
		return nil, err
	}
	return &Group{cg: cg}, nil
}

// Next waits for the next generation of the group and returns it. It fails with ctx's error, with
// ErrGroupClosed after Close, or with the error of a join that failed (the next call retries).
func (g *Group) Next(ctx context.Context) (*Generation, error) {
	gen, err := g.cg.Next(ctx)
	if err != nil {
		return nil, err
	}
	return &Generation{ID: gen.ID, MemberID: gen.MemberID, gen: gen}, nil
}

// Close ends the current generation (its Start functions' contexts end), waits for them and
// leaves the group.
func (g *Group) Close() error { return g.cg.Close() }

// Generation is one generation of a Group: the partitions assigned to this member until the next
// rebalance.
type Generation struct {
	// ID is the generation id: per group, increasing.
	ID int32
	// MemberID is this member's id in the group.
	MemberID string
	gen      *kafka.Generation
}

// PartitionAssignment is one partition assigned to a member, and the offset it starts at: the
// group's committed offset, else the start offset of GroupConfig.StartFromLatest.
type PartitionAssignment struct {
	ID     int
	Offset int64
}

// Assignments returns the partitions of topic assigned to this member, in the order of the
// assignment.
func (g *Generation) Assignments(topic string) []PartitionAssignment {
	assigned := g.gen.Assignments[topic]
	out := make([]PartitionAssignment, len(assigned))
	for i, a := range assigned {
		out[i] = PartitionAssignment{ID: a.ID, Offset: a.Offset}
	}
	return out
}

// Start runs fn in a goroutine of its own; its context ends when the generation ends, and the
// group waits for fn to return before it rejoins.
func (g *Generation) Start(fn func(context.Context)) { g.gen.Start(fn) }

// CommitOffsets commits offsets (topic, partition, next offset) in this generation. It must not
// be called by several goroutines at once.
func (g *Generation) CommitOffsets(offsets map[string]map[int]int64) error {
	return g.gen.CommitOffsets(offsets)
}
