package kafkaio

import (
	"context"
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"
)

// CreateTopic creates topic with partitions partitions and replication replicas (-1: the
// brokers' default), in one CreateTopics request. It does not wait for the partitions' leaders
// (see LeadersKnown). The error names the topic and wraps the broker's.
func CreateTopic(ctx context.Context, c *Client, topic string, partitions, replication int) error {
	res, err := c.CreateTopics(ctx, &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: partitions, ReplicationFactor: replication}},
	})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		return fmt.Errorf("kafkaio: create topic %q: %w", topic, err)
	}
	return nil
}

// LeadersKnown returns nil when the metadata lists topic with partitions that all have a leader,
// else an error that says what is missing (or the request's error).
func LeadersKnown(ctx context.Context, c *Client, topic string) error {
	res, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	switch {
	case err != nil:
		return err
	case len(res.Topics) != 1 || res.Topics[0].Error != nil || len(res.Topics[0].Partitions) == 0:
		return fmt.Errorf("topic %q not in the metadata yet", topic)
	}
	for _, p := range res.Topics[0].Partitions {
		if p.Leader.ID < 0 || p.Leader.Host == "" {
			return fmt.Errorf("partition %s/%d has no leader yet", topic, p.ID)
		}
	}
	return nil
}

// LeaderMoving reports whether err says that a partition's leader is not known, or not the broker
// asked, yet: NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE or UNKNOWN_TOPIC_OR_PARTITION (a topic
// just created).
func LeaderMoving(err error) bool {
	return errors.Is(err, kafka.NotLeaderForPartition) || errors.Is(err, kafka.LeaderNotAvailable) ||
		errors.Is(err, kafka.UnknownTopicOrPartition)
}

// CoordinatorLoading reports whether err says that the group coordinator is not ready to answer
// yet: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS.
func CoordinatorLoading(err error) bool {
	return errors.Is(err, kafka.NotCoordinatorForGroup) || errors.Is(err, kafka.GroupCoordinatorNotAvailable) ||
		errors.Is(err, kafka.GroupLoadInProgress)
}
