package kafkaio

import "github.com/segmentio/kafka-go"

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
