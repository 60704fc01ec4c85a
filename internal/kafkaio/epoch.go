package kafkaio

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Leader epochs (KIP-320). Every partition leader has an epoch that grows with each election,
// and each record batch carries the epoch of the leader that appended it. A PartitionReader
// fetches with the leader epoch it last learned from metadata: a broker whose epoch differs
// answers FENCED_LEADER_EPOCH (the reader's is older) or UNKNOWN_LEADER_EPOCH (newer), instead
// of serving a log that may have diverged. The reader then asks the metadata again, and when the
// leader changed since the batches it read, it asks the new leader with OffsetForLeaderEpoch
// where the log of the epoch of its last batch ends: an end below the reader's position means
// the new leader's log was truncated under it (an unclean election), and the reader goes back to
// that end (see PartitionReader). A reader that starts at a committed offset with the epoch
// committed with it (PartitionReaderConfig.OffsetEpoch) asks the same before its first fetch
// when the leader epoch moved on since. kafka-go knows nothing of epochs, so Metadata and
// OffsetForLeaderEpoch are exchanged raw through its Transport, as fetches are.

const (
	// minEpochMetadataVersion is the first Metadata version with a partition's leader epoch;
	// maxEpochMetadataVersion the last one kdedup sends (topic IDs came with v10).
	minEpochMetadataVersion, maxEpochMetadataVersion = 7, 12
	// minForEpochVersion is the first OffsetForLeaderEpoch version with the current leader
	// epoch; maxForEpochVersion the last one kdedup sends.
	minForEpochVersion, maxForEpochVersion = 2, 4
	// maxRawResponse bounds the responses of rawExchange: a topic's metadata or one
	// partition's epoch end is small.
	maxRawResponse = 16 << 20
)

// errUnsupportedVersion is wrapped by the error of a raw request the broker cannot serve in a
// version that has what kdedup needs.
var errUnsupportedVersion = errors.New("kafkaio: the broker does not support the request version needed")

// rawExchange is one kmsg request sent through kafka-go's Transport to any broker, and its
// response, in the highest version both sides support within [min, max].
type rawExchange struct {
	clientID string
	req      kmsg.Request
	min, max int16
	version  int16 // negotiated by RawExchange when 0 (a version known from an earlier exchange otherwise)
}

// rawResponse is the answer to a rawExchange.
type rawResponse struct{ res kmsg.Response }

// ApiKey implements protocol.Message.
func (x *rawExchange) ApiKey() protocol.ApiKey { return protocol.ApiKey(x.req.Key()) }

// ApiKey implements protocol.Message.
func (r *rawResponse) ApiKey() protocol.ApiKey { return protocol.ApiKey(r.res.Key()) }

// Required implements protocol.RawExchanger: the request is always exchanged raw.
func (x *rawExchange) Required(map[protocol.ApiKey]int16) bool { return true }

// RawExchange implements protocol.RawExchanger: it asks the broker which versions of the request
// it serves (kafka-go's negotiated versions leave out the requests kafka-go does not implement,
// and cap the others at kafka-go's), then writes the request and reads its response. These
// requests are rare (a reader sends them when leadership changes), so the extra round trip is
// cheap.
func (x *rawExchange) RawExchange(rw io.ReadWriter) (protocol.Message, error) {
	if x.version == 0 {
		if err := x.negotiate(rw); err != nil {
			return nil, err
		}
	}
	x.req.SetVersion(x.version)
	body, err := x.exchange(rw, x.req)
	if err != nil {
		return nil, err
	}
	res := x.req.ResponseKind()
	res.SetVersion(x.version)
	if res.IsFlexible() { // the response header's tagged fields follow the correlation id
		if body, err = skipTags(body); err != nil {
			return nil, err
		}
	}
	if err := res.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("kafkaio: decoding %s response: %w", kmsg.NameForKey(x.req.Key()), err)
	}
	return &rawResponse{res: res}, nil
}

// negotiate sets x.version to the highest version of x's request in [x.min, x.max] that the
// broker on rw serves, or fails with errUnsupportedVersion.
func (x *rawExchange) negotiate(rw io.ReadWriter) error {
	req := kmsg.NewPtrApiVersionsRequest() // v0: neither request nor response is flexible
	body, err := x.exchange(rw, req)
	if err != nil {
		return err
	}
	res := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	if err := res.ReadFrom(body); err != nil {
		return fmt.Errorf("kafkaio: decoding ApiVersions response: %w", err)
	}
	for _, k := range res.ApiKeys {
		if k.ApiKey == x.req.Key() && k.MaxVersion >= x.min && k.MinVersion <= x.max {
			x.version = min(k.MaxVersion, x.max)
			return nil
		}
	}
	return fmt.Errorf("%w: %s v%d", errUnsupportedVersion, kmsg.NameForKey(x.req.Key()), x.min)
}

// exchange writes req on rw and returns its response's body after the correlation id.
func (x *rawExchange) exchange(rw io.ReadWriter, req kmsg.Request) ([]byte, error) {
	id := correlationIDs.Add(1)
	if _, err := rw.Write(kmsg.NewRequestFormatter(kmsg.FormatterClientID(x.clientID)).AppendRequest(nil, req, id)); err != nil {
		return nil, err
	}
	return readRaw(rw, id)
}

// readRaw reads the response to request id from r and returns it after the correlation id.
func readRaw(r io.Reader, id int32) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 4 || n > maxRawResponse {
		return nil, fmt.Errorf("kafkaio: response of %d bytes", n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	if got := int32(binary.BigEndian.Uint32(buf)); got != id {
		return nil, fmt.Errorf("kafkaio: response with correlation id %d, want %d", got, id)
	}
	return buf[4:], nil
}

// skipTags returns b after the tagged fields it starts with.
func skipTags(b []byte) ([]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errors.New("kafkaio: bad response header")
	}
	b = b[k:]
	for range n {
		if _, k = binary.Uvarint(b); k <= 0 {
			return nil, errors.New("kafkaio: bad response header")
		}
		b = b[k:]
		size, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < size {
			return nil, errors.New("kafkaio: bad response header")
		}
		b = b[k+int(size):]
	}
	return b, nil
}

// leaderExchange is a rawExchange sent to the leader of one partition.
type leaderExchange struct {
	rawExchange
	topic     string
	partition int32
}

// Broker implements protocol.BrokerMessage: the request goes to the partition's leader.
func (x *leaderExchange) Broker(c protocol.Cluster) (protocol.Broker, error) {
	return (&fetchRequest{topic: x.topic, partition: x.partition}).Broker(c)
}

// roundTrip sends m through c's Transport and returns its response.
func roundTrip(ctx context.Context, c *kafka.Client, m protocol.Message) (kmsg.Response, error) {
	res, err := transportOf(c).RoundTrip(ctx, c.Addr, m)
	if err != nil {
		return nil, err
	}
	return res.(*rawResponse).res, nil
}

// partitionLeader is what the metadata says of one partition's leadership.
type partitionLeader struct {
	epoch   int32    // the leader epoch
	topicID [16]byte // the topic's ID; zero before Metadata v10
}

// leaderOf returns the leader epoch of topic/partition and the topic's ID, from a Metadata
// request for that topic alone. A topic or partition error is returned as a kafka.Error.
func leaderOf(ctx context.Context, c *kafka.Client, clientID, topic string, partition int32) (partitionLeader, error) {
	res, err := topicMetadata(ctx, c, clientID, topic)
	if err != nil {
		return partitionLeader{}, err
	}
	return leaderIn(res, topic, partition)
}

// topicMetadata sends a Metadata request for topic alone, in a version that tells leader epochs.
func topicMetadata(ctx context.Context, c *kafka.Client, clientID, topic string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = []kmsg.MetadataRequestTopic{rt}
	res, err := roundTrip(ctx, c, &rawExchange{clientID: clientID, req: req,
		min: minEpochMetadataVersion, max: maxEpochMetadataVersion})
	if err != nil {
		return nil, err
	}
	return res.(*kmsg.MetadataResponse), nil
}

// leaderIn returns what res, a Metadata response, says of topic/partition's leadership. A topic
// or partition error is returned as a kafka.Error.
func leaderIn(res *kmsg.MetadataResponse, topic string, partition int32) (partitionLeader, error) {
	for _, t := range res.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if t.ErrorCode != 0 {
			return partitionLeader{}, kafka.Error(t.ErrorCode)
		}
		for _, p := range t.Partitions {
			if p.Partition == partition {
				if p.ErrorCode != 0 && p.ErrorCode != int16(kafka.ReplicaNotAvailable) {
					return partitionLeader{}, kafka.Error(p.ErrorCode)
				}
				return partitionLeader{epoch: p.LeaderEpoch, topicID: t.TopicID}, nil
			}
		}
	}
	return partitionLeader{}, kafka.UnknownTopicOrPartition
}

// epochEnd returns where the log of leader epoch epoch ends on topic/partition's leader, whose
// epoch the caller knows as current: the first offset of the next larger epoch, or the log end
// when epoch is the latest. The leader may answer with a lower epoch than asked, with the end of
// that one, when it never had epoch. A partition error is returned as a kafka.Error
// (FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH when current is not the leader's).
func epochEnd(ctx context.Context, c *kafka.Client, clientID, topic string, partition, current, epoch int32) (int64, error) {
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = partition, current, epoch
	rt.Partitions = []kmsg.OffsetForLeaderEpochRequestTopicPartition{rp}
	req.Topics = []kmsg.OffsetForLeaderEpochRequestTopic{rt}
	res, err := roundTrip(ctx, c, &leaderExchange{topic: topic, partition: partition,
		rawExchange: rawExchange{clientID: clientID, req: req, min: minForEpochVersion, max: maxForEpochVersion}})
	if err != nil {
		return 0, err
	}
	for _, t := range res.(*kmsg.OffsetForLeaderEpochResponse).Topics {
		for _, p := range t.Partitions {
			if t.Topic == topic && p.Partition == partition {
				if p.ErrorCode != 0 {
					return 0, kafka.Error(p.ErrorCode)
				}
				return p.EndOffset, nil
			}
		}
	}
	return 0, kafka.UnknownTopicOrPartition
}

// lastEpoch returns the partition leader epoch of the last complete batch in set, or -1 when
// set has none.
func lastEpoch(set []byte) int32 {
	epoch := int32(-1)
	var d BatchDecoder
	for len(set) > 0 {
		hdr, rest, err := d.header(set)
		if err != nil {
			break
		}
		epoch, set = hdr.PartitionLeaderEpoch, rest
	}
	return epoch
}
