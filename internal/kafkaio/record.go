package kafkaio

import (
	"time"

	"github.com/segmentio/kafka-go"
)

// Record is one Kafka record as kdedup handles it, on both sides of the wire layer: what
// PartitionReader.Fetch and Read hand out, and what Producer.Produce writes. It is kdedup's own
// type, so that kafka-go's types stop at this package; its fields have the names of kafka-go's
// Message.
//
// A record handed out by a read points into the reader's memory (see Batch.Records and Read):
// Key, Value and the header values are only valid as long as the reader says; a caller that keeps
// a record copies them. For a record to produce, Topic and Offset are ignored (Producer.Produce names
// the topic), Partition is read by the callers that route records themselves, and a zero Time is
// the time of the produce call.
type Record struct {
	// Topic and Partition say where the record was read.
	Topic     string
	Partition int
	// Offset is the record's offset in its partition.
	Offset int64
	// Key and Value are nil for a null key or value.
	Key   []byte
	Value []byte
	// Headers are the record's headers, in order.
	Headers []Header
	// Time is the record's timestamp.
	Time time.Time
}

// Header is one record header. Its fields have the names of kafka-go's protocol.Header.
type Header struct {
	Key   string
	Value []byte
}

// KeyPartition returns the partition of partitions that the Java client's default partitioner
// picks for a non-null key: partitions[(murmur2(key) & 0x7fffffff) % len(partitions)]. It is safe
// for concurrent use.
func KeyPartition(key []byte, partitions ...int) int {
	return kafka.Murmur2Balancer{Consistent: true}.Balance(kafka.Message{Key: key}, partitions...)
}

// Compression is the codec of produced record batches, by its Kafka name. The zero value is
// CompressionNone.
type Compression string

// The codecs of Compression.
const (
	CompressionNone   Compression = "none"
	CompressionGzip   Compression = "gzip"
	CompressionSnappy Compression = "snappy"
	CompressionLz4    Compression = "lz4"
	CompressionZstd   Compression = "zstd"
)

// Compressions returns the names of the codecs, CompressionNone first.
func Compressions() []Compression {
	return []Compression{CompressionNone, CompressionGzip, CompressionSnappy, CompressionLz4, CompressionZstd}
}

// Valid reports whether c is "" or one of Compressions.
func (c Compression) Valid() bool {
	_, ok := codecs[c]
	return ok || c == ""
}

var codecs = map[Compression]kafka.Compression{
	CompressionNone: 0, CompressionGzip: kafka.Gzip, CompressionSnappy: kafka.Snappy, CompressionLz4: kafka.Lz4,
	CompressionZstd: kafka.Zstd,
}

// codec returns kafka-go's codec number of c; 0 (none) for "" or an unknown name.
func (c Compression) codec() kafka.Compression { return codecs[c] }
