package consumer

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// Mode says what happens to a duplicate.
type Mode string

const (
	// ModeDrop does not produce duplicates to the output topic.
	ModeDrop Mode = "drop"
	// ModeMark produces every record; duplicates carry the Config.MarkHeader header with value "1".
	ModeMark Mode = "mark"
)

// Partitioning says which output partition a record goes to.
type Partitioning string

const (
	// PartitionSame writes a record to the output partition with the number of its input
	// partition. Input and output topics must have the same number of partitions.
	PartitionSame Partitioning = "same"
	// PartitionHash writes a record with a non-null key to murmur2(key) & 0x7fffffff % n, the
	// partition the Java client's default partitioner picks; a record with a null key goes to
	// input partition % n.
	PartitionHash Partitioning = "hash"
)

// UnkeyedPolicy says what happens to a record whose identity cannot be extracted.
type UnkeyedPolicy string

const (
	// UnkeyedPass produces the record without deduplicating it.
	UnkeyedPass UnkeyedPolicy = "pass"
	// UnkeyedDrop does not produce the record.
	UnkeyedDrop UnkeyedPolicy = "drop"
)

// MarkValue is the value of the mark header that ModeMark puts on duplicates.
const MarkValue = "1"

// Config configures a Worker. It is a plain value; cmd/kdedup fills it from environment variables
// (the documented operator-facing defaults live in its struct tags). Fields documented as
// "default X" take X when zero.
type Config struct {
	// Brokers are the bootstrap broker addresses (host:port). Required.
	Brokers []string
	// InputTopic is consumed. Required.
	InputTopic string
	// OutputTopic receives the deduplicated stream. Required; must differ from InputTopic.
	OutputTopic string
	// DuplicatesTopic, when set, also receives every duplicate (in both modes), written to
	// partition input partition % its partition count.
	DuplicatesTopic string
	// GroupID is the consumer group. Default "kdedup".
	GroupID string
	// ClientID is sent to the brokers. Default "kdedup".
	ClientID string
	// StartFromLatest starts a partition without committed offset at its end instead of its
	// beginning.
	StartFromLatest bool

	// SessionTimeout is the group session timeout. Default 10s.
	SessionTimeout time.Duration
	// HeartbeatInterval is the group heartbeat interval. Default 3s.
	HeartbeatInterval time.Duration
	// RebalanceTimeout is how long the group coordinator waits for members to rejoin, and also
	// bounds how long a partition may take to drain, commit and Revoke at the end of a
	// generation. Default 30s.
	RebalanceTimeout time.Duration

	// BatchSize is the maximum number of input records processed and produced together. Default 1000.
	BatchSize int
	// BatchBytes caps the size of one produce request (key+value+headers). Default 1 MiB - 64 KiB.
	BatchBytes int
	// BatchTimeout is how long a partition waits for more records once a batch has its first
	// one. Default 5ms.
	BatchTimeout time.Duration
	// CommitInterval is how often acknowledged offsets are committed; 0 commits after every
	// batch (commits are coalesced either way). Offsets are also committed when a partition is
	// revoked.
	CommitInterval time.Duration
	// FetchMaxWait is how long a fetch waits on the broker for new records. Default 500ms. It also
	// bounds how long closing an idle partition reader takes.
	FetchMaxWait time.Duration
	// FetchMaxBytes is the maximum size of one fetch response. Default 16 MiB.
	FetchMaxBytes int
	// QueueCapacity is the number of prefetched records buffered per partition. Default 2*BatchSize.
	QueueCapacity int

	// Partitioning chooses the output partition. Default PartitionSame.
	Partitioning Partitioning
	// Mode says what happens to duplicates. Default ModeDrop.
	Mode Mode
	// MarkHeader is the header ModeMark adds to duplicates. Default "kdedup-duplicate".
	MarkHeader string
	// Unkeyed says what happens to records without an extractable key. Default UnkeyedPass.
	Unkeyed UnkeyedPolicy
	// Compression of produced batches. Default none.
	Compression kafka.Compression
	// DisableIdempotence turns idempotent production off. Default false: output batches carry a
	// producer id and sequence numbers (KIP-98), so a produce retry whose first attempt was
	// written is not written again, and Run fails with ErrIdempotenceUnsupported when the
	// brokers cannot do that. With true, batches are produced as kafka-go's Writer does and a
	// retried batch can be duplicated in the output topic.
	DisableIdempotence bool

	// TLS, when not nil, is used for every broker connection.
	TLS *tls.Config
	// SASL, when not nil, authenticates every broker connection.
	SASL sasl.Mechanism

	// ShutdownTimeout bounds the drain after Run's context is cancelled. Default 30s.
	ShutdownTimeout time.Duration
	// ProduceTimeout bounds one produce request. Default 10s.
	ProduceTimeout time.Duration
	// RetryBackoffMax caps the backoff between retries of produce requests, metadata lookups and
	// Assign calls. Default 5s.
	RetryBackoffMax time.Duration
}

// withDefaults returns c with every zero field that has a default set to it.
func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.GroupID == "" {
		c.GroupID = "kdedup"
	}
	if c.ClientID == "" {
		c.ClientID = "kdedup"
	}
	def(&c.SessionTimeout, 10*time.Second)
	def(&c.HeartbeatInterval, 3*time.Second)
	def(&c.RebalanceTimeout, 30*time.Second)
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = 1<<20 - 64<<10
	}
	def(&c.BatchTimeout, 5*time.Millisecond)
	def(&c.FetchMaxWait, 500*time.Millisecond)
	if c.FetchMaxBytes == 0 {
		c.FetchMaxBytes = 16 << 20
	}
	if c.QueueCapacity == 0 {
		c.QueueCapacity = 2 * c.BatchSize
	}
	if c.Partitioning == "" {
		c.Partitioning = PartitionSame
	}
	if c.Mode == "" {
		c.Mode = ModeDrop
	}
	if c.MarkHeader == "" {
		c.MarkHeader = "kdedup-duplicate"
	}
	if c.Unkeyed == "" {
		c.Unkeyed = UnkeyedPass
	}
	def(&c.ShutdownTimeout, 30*time.Second)
	def(&c.ProduceTimeout, 10*time.Second)
	def(&c.RetryBackoffMax, 5*time.Second)
	return c
}

// Validate reports every problem of c (after defaults) joined into one error, or nil.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("consumer: "+format, args...)) }
	if len(c.Brokers) == 0 {
		bad("no brokers")
	}
	for _, b := range c.Brokers {
		if b == "" {
			bad("empty broker address")
		}
	}
	if c.InputTopic == "" {
		bad("no input topic")
	}
	if c.OutputTopic == "" {
		bad("no output topic")
	}
	if c.InputTopic != "" && c.OutputTopic == c.InputTopic {
		bad("output topic %q is the input topic", c.OutputTopic)
	}
	if c.DuplicatesTopic != "" && (c.DuplicatesTopic == c.InputTopic || c.DuplicatesTopic == c.OutputTopic) {
		bad("duplicates topic %q must differ from the input and output topics", c.DuplicatesTopic)
	}
	if c.HeartbeatInterval <= 0 || c.SessionTimeout <= 0 || c.RebalanceTimeout <= 0 {
		bad("session timeout, heartbeat interval and rebalance timeout must be positive")
	} else if c.HeartbeatInterval >= c.SessionTimeout {
		bad("heartbeat interval %v must be shorter than the session timeout %v", c.HeartbeatInterval, c.SessionTimeout)
	}
	if c.BatchSize < 1 {
		bad("batch size %d must be at least 1", c.BatchSize)
	}
	if c.BatchBytes < 1 {
		bad("batch bytes %d must be at least 1", c.BatchBytes)
	}
	if c.BatchTimeout < 0 || c.CommitInterval < 0 || c.FetchMaxWait < 0 || c.ShutdownTimeout < 0 ||
		c.ProduceTimeout < 0 || c.RetryBackoffMax < 0 {
		bad("durations must not be negative")
	}
	if c.FetchMaxBytes < 1 || c.QueueCapacity < 1 {
		bad("fetch max bytes and queue capacity must be positive")
	}
	switch c.Partitioning {
	case PartitionSame, PartitionHash:
	default:
		bad("unknown partitioning %q (want same or hash)", c.Partitioning)
	}
	switch c.Mode {
	case ModeDrop, ModeMark:
	default:
		bad("unknown mode %q (want drop or mark)", c.Mode)
	}
	switch c.Unkeyed {
	case UnkeyedPass, UnkeyedDrop:
	default:
		bad("unknown unkeyed policy %q (want pass or drop)", c.Unkeyed)
	}
	return errors.Join(errs...)
}
