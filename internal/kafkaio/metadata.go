package kafkaio

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// PartitionCounts returns the number of partitions of each of topics, in the order given, from one
// metadata request. It fails if the request fails or any topic is missing, carries an error or has
// no partitions; the error names the topic and wraps the broker's (kafka.UnknownTopicOrPartition
// for a topic the metadata does not list; for a topic the ACLs hide, a *ConnError of kind
// ErrAuthorization that wraps kafka.TopicAuthorizationFailed). It is safe for concurrent use, as c is.
func PartitionCounts(ctx context.Context, c *kafka.Client, topics ...string) ([]int, error) {
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("kafkaio: metadata of %q: brokers unreachable: %w", topics, err)
	}
	counts := make([]int, len(topics))
	for i, name := range topics {
		found := false
		for _, t := range md.Topics {
			if t.Name != name {
				continue
			}
			switch {
			case t.Error != nil:
				return nil, fmt.Errorf("kafkaio: topic %q: %w", name, Denied(t.Error, "DESCRIBE", fmt.Sprintf("topic %q", name)))
			case len(t.Partitions) == 0:
				return nil, fmt.Errorf("kafkaio: topic %q has no partitions", name)
			}
			counts[i], found = len(t.Partitions), true
			break
		}
		if !found {
			return nil, fmt.Errorf("kafkaio: topic %q not in metadata: %w", name, kafka.UnknownTopicOrPartition)
		}
	}
	return counts, nil
}

// PartitionCount returns the number of partitions of topic; see PartitionCounts.
func PartitionCount(ctx context.Context, c *kafka.Client, topic string) (int, error) {
	n, err := PartitionCounts(ctx, c, topic)
	if err != nil {
		return 0, err
	}
	return n[0], nil
}

// ListOffsets returns the log start offset (FirstOffset) and the end offset (LastOffset, the high
// watermark) of each of partitions of topic, from one request. Partition-level errors are left in
// the results' Error, for the caller to judge one partition at a time; a partition the topic does
// not have gets kafka.UnknownTopicOrPartition. The error is for a request that failed as a whole.
func ListOffsets(ctx context.Context, c *kafka.Client, topic string, partitions []int) (map[int]kafka.PartitionOffsets, error) {
	return listOffsets(ctx, c, topic, partitions, ReadUncommitted)
}

// StableOffsets is ListOffsets for a reader of isolation iso: under ReadCommitted, LastOffset is
// the last stable offset (the first offset of the oldest open transaction, or the high watermark
// when none is open), where a read_committed fetch stops.
func StableOffsets(ctx context.Context, c *kafka.Client, topic string, partitions []int, iso Isolation) (map[int]kafka.PartitionOffsets, error) {
	return listOffsets(ctx, c, topic, partitions, iso)
}

func listOffsets(ctx context.Context, c *kafka.Client, topic string, partitions []int, iso Isolation) (map[int]kafka.PartitionOffsets, error) {
	reqs := make([]kafka.OffsetRequest, 0, 2*len(partitions))
	for _, p := range partitions {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	res, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{
		Topics: map[string][]kafka.OffsetRequest{topic: reqs}, IsolationLevel: iso.level(),
	})
	if err != nil {
		return nil, fmt.Errorf("kafkaio: listing offsets of topic %q: %w", topic, err)
	}
	out := make(map[int]kafka.PartitionOffsets, len(partitions))
	for _, po := range res.Topics[topic] {
		out[po.Partition] = po
	}
	for _, p := range partitions {
		if _, ok := out[p]; !ok {
			out[p] = kafka.PartitionOffsets{Partition: p, Error: kafka.UnknownTopicOrPartition}
		}
	}
	return out, nil
}

// TopicOffsets returns the log start and end offsets of partitions 0..n-1 of topic, indexed by
// partition. Unlike ListOffsets it fails if any partition carries an error; the error names it.
func TopicOffsets(ctx context.Context, c *kafka.Client, topic string, n int) (first, end []int64, err error) {
	parts := make([]int, n)
	for p := range parts {
		parts[p] = p
	}
	offs, err := ListOffsets(ctx, c, topic, parts)
	if err != nil {
		return nil, nil, err
	}
	first, end = make([]int64, n), make([]int64, n)
	for _, p := range parts {
		o := offs[p]
		if o.Error != nil {
			return nil, nil, fmt.Errorf("kafkaio: offsets of %s/%d: %w", topic, p, o.Error)
		}
		first[p], end[p] = o.FirstOffset, o.LastOffset
	}
	return first, end, nil
}

// OffsetsAfter returns, for each of partitions of topic, the offset of the first record whose
// timestamp is at or after t, or -1 when the partition has no such record, from one request (as
// the broker's time index answers it: with records out of timestamp order, the first record at
// or after t in the log order of the batches). A partition error (kafka.UnknownTopicOrPartition
// for one the topic does not have) fails the call; the error names the partition.
func OffsetsAfter(ctx context.Context, c *kafka.Client, topic string, partitions []int, t time.Time) (map[int]int64, error) {
	reqs := make([]kafka.OffsetRequest, len(partitions))
	for i, p := range partitions {
		reqs[i] = kafka.TimeOffsetOf(p, t)
	}
	res, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("kafkaio: offsets of topic %q at %s: %w", topic, t.Format(time.RFC3339), err)
	}
	out := make(map[int]int64, len(partitions))
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("kafkaio: offset of %s/%d at %s: %w", topic, po.Partition, t.Format(time.RFC3339), po.Error)
		}
		// kafka-go files a timestamp answer under the requested time; "none" is offset -1.
		out[po.Partition] = -1
		for off := range po.Offsets {
			out[po.Partition] = off
		}
	}
	for _, p := range partitions {
		if _, ok := out[p]; !ok {
			return nil, fmt.Errorf("kafkaio: offset of %s/%d at %s: %w", topic, p, t.Format(time.RFC3339), kafka.UnknownTopicOrPartition)
		}
	}
	return out, nil
}

// MaxMessageBytes returns the max.message.bytes of each of topics, in the order given, from one
// DescribeConfigs request: the largest record batch the brokers accept for the topic (the
// topic's setting, or the broker's message.max.bytes when the topic has none). It fails if the
// request fails or any topic carries an error (kafka.TopicAuthorizationFailed when the client
// may not describe its configuration) or lacks the setting; the error names the topic. Producer
// bounds its batches by it (SetMaxMessageBytes). It is safe for concurrent use, as c is.
func MaxMessageBytes(ctx context.Context, c *kafka.Client, topics ...string) ([]int, error) {
	const name = "max.message.bytes"
	req := &kafka.DescribeConfigsRequest{}
	for _, t := range topics {
		req.Resources = append(req.Resources, kafka.DescribeConfigRequestResource{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: t, ConfigNames: []string{name},
		})
	}
	res, err := c.DescribeConfigs(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("kafkaio: configuration of %q: %w", topics, err)
	}
	out := make([]int, len(topics))
	for i, t := range topics {
		out[i] = -1
		for _, r := range res.Resources {
			if r.ResourceName != t {
				continue
			}
			if r.Error != nil {
				return nil, fmt.Errorf("kafkaio: configuration of topic %q: %w", t, r.Error)
			}
			for _, e := range r.ConfigEntries {
				if n, err := strconv.Atoi(e.ConfigValue); e.ConfigName == name && err == nil && n > 0 {
					out[i] = n
				}
			}
		}
		if out[i] < 0 {
			return nil, fmt.Errorf("kafkaio: configuration of topic %q: no %s", t, name)
		}
	}
	return out, nil
}

// AlterTopicConfig sets configs (name → value) of topic with one IncrementalAlterConfigs request;
// settings it does not name keep their values. The error names the topic and wraps the broker's.
// The embedded broker's tooling and tests use it to give topics limits such as
// max.message.bytes. It is safe for concurrent use, as c is.
func AlterTopicConfig(ctx context.Context, c *kafka.Client, topic string, configs map[string]string) error {
	res := kafka.IncrementalAlterConfigsRequestResource{ResourceType: kafka.ResourceTypeTopic, ResourceName: topic}
	for name, value := range configs {
		res.Configs = append(res.Configs, kafka.IncrementalAlterConfigsRequestConfig{
			Name: name, Value: value, ConfigOperation: kafka.ConfigOperationSet,
		})
	}
	out, err := c.IncrementalAlterConfigs(ctx, &kafka.IncrementalAlterConfigsRequest{
		Resources: []kafka.IncrementalAlterConfigsRequestResource{res},
	})
	if err == nil {
		for _, r := range out.Resources {
			if r.Error != nil {
				err = r.Error
			}
		}
	}
	if err != nil {
		return fmt.Errorf("kafkaio: configuring topic %q: %w", topic, err)
	}
	return nil
}
