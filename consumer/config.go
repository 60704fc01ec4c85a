package consumer

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/kdedup/kdedup/internal/kafkaio"
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
	// PartitionIdentity writes a record to the partition of its identity (RoutePartition), so that
	// every copy of an identity, from any input partition or topic, reaches one partition; a record
	// without an identity goes to input partition % n. It is the router's (see route.go).
	PartitionIdentity Partitioning = "identity"
)

// UnkeyedPolicy says what happens to a record whose identity cannot be extracted.
type UnkeyedPolicy string

const (
	// UnkeyedPass produces the record without deduplicating it.
	UnkeyedPass UnkeyedPolicy = "pass"
	// UnkeyedDrop does not produce the record.
	UnkeyedDrop UnkeyedPolicy = "drop"
)

// Delivery says what the output holds after failures.
type Delivery string

const (
	// DeliveryAtLeastOnce writes the output idempotently and commits input offsets after the
	// output acknowledged the records: after a crash or a rebalance, records after the last
	// committed offset are consumed again, and those the deduplication state does not know
	// (the previous owner's last writes) can be written twice.
	DeliveryAtLeastOnce Delivery = "at-least-once"
	// DeliveryExactlyOnce writes the output in Kafka transactions, one transactional producer per
	// input partition, and commits the input offsets inside them; each new owner of a partition
	// fences the previous one. Readers of the output must read it read_committed. See txn.go.
	DeliveryExactlyOnce Delivery = "exactly-once"
)

// GroupProtocol is how the worker rebalances its consumer group.
type GroupProtocol string

const (
	// GroupEager rebalances eagerly: at every rebalance the worker releases every partition
	// (drain, final commit, final snapshot) before it rejoins, and then assigns what the new
	// generation gives it, the partitions that stay included.
	GroupEager GroupProtocol = "eager"
	// GroupCooperative rebalances incrementally (KIP-429, kafkaio.CooperativeProtocol): the
	// worker keeps consuming its partitions through a rebalance, releases only those the new
	// generation takes away and rejoins at once after it did, so that the next generation hands
	// them out. A group one of whose members lists only eager protocols (an older version, during
	// a rolling upgrade) agrees on an eager protocol, and the worker then rebalances eagerly.
	GroupCooperative GroupProtocol = "cooperative"
)

// MarkValue is the value of the mark header that ModeMark puts on duplicates.
const MarkValue = "1"

// DefaultMarkHeader is the mark header of internal/app's default configuration (DEDUP_MARK_HEADER's
// envDefault, which a test there holds to it).
const DefaultMarkHeader = "kdedup-duplicate"

// Config configures a Worker. It is a plain value with no defaults of its own: internal/app fills
// every field from its environment variable, whose envDefault tag is the one definition of its
// default, and consumer's tests start from AppDefaults, generated from those tags. A field
// documented as "Required" must be set: Validate refuses its zero value.
type Config struct {
	// Brokers are the bootstrap brokers, host:port. Required. Every connection of the Worker
	// and the OutputReader is made from Brokers, ClientID, TLS and SASL.
	Brokers []string
	// ClientID is sent to the brokers with every request. Required.
	ClientID string
	// TLS, when not nil, secures every connection. It is used as is (not cloned).
	TLS *tls.Config
	// SASL, when not nil, authenticates every connection (see NewSASL).
	SASL *SASL
	// InputTopic is consumed. Required.
	InputTopic string
	// OutputTopic receives the deduplicated stream. Required; must differ from InputTopic.
	OutputTopic string
	// DuplicatesTopic, when set, is the audit topic: it receives every record the Worker drops
	// (duplicates, in both modes, and records dropped by a policy), plus headers that say where
	// it came from and why, written to partition input partition % its partition count (the same
	// partition number when the counts match). See "The audit topic" in audit.go.
	DuplicatesTopic string
	// DuplicatesContent says what an audit record keeps of the dropped record. Required.
	DuplicatesContent AuditContent
	// DeadLetterTopic, when set, receives every record that the output (or duplicates) topic
	// refuses on its own for what it is (kafkaio.RefusalReasons: too large for the topic's
	// max.message.bytes, invalid), unchanged plus the DeadLetterHeader* headers, written to
	// partition input partition % its partition count; the partition then goes on, and the input
	// offset is committed past the record once the dead letter was acknowledged. The record's
	// identity stays in the deduplication state, so its duplicates within the window are dropped
	// as for any record. When unset (the default), or when the dead-letter topic refuses the
	// record too, the partition blocks at the record: see Worker.Blocked.
	DeadLetterTopic string
	// GroupID is the consumer group. Required.
	GroupID string
	// GroupInstanceID, when set, makes the worker a static member of the group (KIP-345): a
	// worker restarted with the same instance id within SessionTimeout gets its partitions back
	// with no rebalance, and a worker that stops does not leave the group, so its partitions
	// move only once its session expired. Two running workers must never share one. Default
	// empty: a dynamic member, which leaves the group when it stops.
	GroupInstanceID string
	// GroupProtocol is GroupEager or GroupCooperative. Required.
	GroupProtocol GroupProtocol
	// StartFromLatest starts a partition without committed offset at its end instead of its
	// beginning, and restarts a partition whose offset is past the end of its log (the log was
	// truncated, or the topic recreated) at its end instead of its beginning. A partition whose
	// records at the offset were deleted by retention goes on at its beginning either way.
	StartFromLatest bool
	// Isolation says which records of transactional producers are read, from the input topic by
	// the Worker and from the output topic by the OutputReader. Under kafkaio.ReadCommitted only
	// committed records are read, up to the last stable offset: a transaction left open holds the
	// partition back until it ends (or the broker aborts it at its transaction timeout). Under
	// kafkaio.ReadUncommitted the records of aborted transactions are read (and deduplicated, and
	// produced) like any other. Transaction markers are never read. It is one of the Kafka names
	// "read_committed" and "read_uncommitted". Required.
	Isolation string

	// SessionTimeout is the group session timeout. Required.
	SessionTimeout time.Duration
	// HeartbeatInterval is the group heartbeat interval. Required.
	HeartbeatInterval time.Duration
	// RebalanceTimeout is how long the group coordinator waits for members to rejoin. It also
	// bounds how long a partition may take to drain, commit and Revoke at the end of a
	// generation: the release budget is RebalanceTimeout less HeartbeatInterval (the coordinator
	// starts its clock when the rebalance begins, a member notices it at its next heartbeat) and
	// less a margin for rejoining (a tenth of RebalanceTimeout, at most one second). The Worker
	// keeps heartbeating while it releases partitions, so SessionTimeout does not cut the release
	// short. It must be longer than HeartbeatInterval. Required.
	RebalanceTimeout time.Duration

	// BatchSize is the maximum number of input records processed and produced together, 1 to 1000000.
	BatchSize int
	// BatchBytes caps the size of one produce request (key+value+headers), at least 1024.
	BatchBytes int
	// BatchTimeout is how long a partition waits for more records once a batch has its first
	// one. Required.
	BatchTimeout time.Duration
	// CommitInterval is how often acknowledged offsets are committed; 0 commits after every
	// batch (commits are coalesced either way). Offsets are also committed when a partition is
	// revoked.
	CommitInterval time.Duration
	// FetchMaxWait is how long a fetch waits on the broker for new records. Required. The
	// worker waits kafkaio.FetchSlack (5s) more for the broker's answer before it gives up on the
	// fetch and its connection, so a broker must answer a fetch within FetchMaxWait plus that.
	FetchMaxWait time.Duration
	// FetchFailingMax is how long a partition's fetches may keep failing before the worker
	// reports not ready (Worker.Ready). Required.
	FetchFailingMax time.Duration
	// ProgressInterval is how often a partition whose records are not being taken (blocked at a
	// refused record, or its writes hang) looks its offsets up for Observer.Progress. Required.
	ProgressInterval time.Duration
	// FetchMaxBytes is the maximum size of one partition's part of a fetch response; the one
	// fetch per broker that carries all of its partitions is capped at four times it. Each
	// partition holds up to three answers at once (the one being processed, the next one, one
	// more while a batch spans two). At least 1024.
	FetchMaxBytes int
	// InputMemoryLimit bounds the bytes of fetched input the worker holds, all partitions
	// together: the requests of its fetches ask for no more than is free, and buffers are not
	// kept for reuse above it (kafkaio.FetchPoolConfig.MaxBufferedBytes). The re-warm reads of
	// the output topic take a quarter of it (rewarmMemory) and the input partitions the rest, so
	// a rebalance that re-warms partitions while others are consumed stays within it. Default:
	// 0, not bounded.
	InputMemoryLimit int64
	// DecodeMaxBytes caps the decompressed records of one input record batch, and the headers of
	// one record at DecodeMaxBytes/256 (kafkaio.DefaultDecodeLimits); a batch or record over them
	// is refused input (see "Refused input" in refuse.go). At least 1024; internal/app's default is
	// kafkaio.DefaultDecodeMaxBytes(FetchMaxBytes), four times the fetch size.
	DecodeMaxBytes int

	// Partitioning chooses the output partition. Required.
	Partitioning Partitioning
	// Route makes the Worker the router of the routed scope (see route.go): every record it
	// produces carries the RouteHeader* headers (where it was read, and its identity). Use it with
	// PartitionIdentity and a Passer. Default false.
	Route bool
	// StripRouteHeaders makes the Worker stage 2 of the routed scope: the records it produces to
	// the output topic lose their RouteHeader* headers (the audit topic's keep them: they say where
	// a dropped copy came from), and a record's identity is its RouteHeaderID header when it has
	// one (the KeyFunc, RouteKey, is called for the others and by the re-warm and rebuild, whose
	// output records have no such header). Default false.
	StripRouteHeaders bool
	// Mode says what happens to duplicates. Required.
	Mode Mode
	// MarkHeader is the header ModeMark adds to duplicates. Required, not blank.
	MarkHeader string
	// ProcessedHeader, when set, names a header the worker adds to every output record: the
	// time its batch was processed (read before the batch is judged), 8 bytes of big-endian Unix milliseconds (before the mark
	// header in ModeMark). The OutputReader then reports that time instead of the record's own
	// timestamp, so that a rebuild under processing time finds what this stage produced in the
	// last window even when the records' timestamps are older (a catch-up; see "Rebuild after a
	// catch-up" in dedup/rebuild.go). Default "" (no header).
	ProcessedHeader string
	// Unkeyed says what happens to records without an extractable key. Required.
	Unkeyed UnkeyedPolicy
	// Compression of produced batches, by its Kafka name: "none", "gzip", "snappy", "lz4" or
	// "zstd". Required.
	Compression string
	// DisableIdempotence turns idempotent production off. Default false: output batches carry a
	// producer id and sequence numbers (KIP-98), so a produce retry whose first attempt was
	// written is not written again, and Run fails with ErrIdempotenceUnsupported when the
	// brokers cannot do that. With true, batches are produced as kafka-go's Writer does and a
	// retried batch can be duplicated in the output topic.
	DisableIdempotence bool

	// Delivery says what the output holds after failures. Required.
	Delivery Delivery
	// TxnMaxRecords commits a transaction (DeliveryExactlyOnce) once it holds this many input
	// records. Required under DeliveryExactlyOnce.
	TxnMaxRecords int
	// TxnInterval commits a transaction (DeliveryExactlyOnce) once its first batch is this old,
	// which bounds what read_committed readers of the output wait. Required under DeliveryExactlyOnce.
	TxnInterval time.Duration
	// TxnTimeout is how long the transaction coordinator lets a transaction stay open before it
	// aborts it (DeliveryExactlyOnce); it bounds how long a crashed owner's open transaction holds
	// read_committed readers when no new owner fences it sooner. Between 1s and 15m under DeliveryExactlyOnce.
	TxnTimeout time.Duration

	// SourceKey, with Sources, reads each record's source for the per-source counts: the worker
	// calls it on every record consumed (keyed or not) and hands what it returns to a SourceTally
	// with the record's verdict. Default nil: no source is read. It has the contract of KeyFunc,
	// except that a retry error only means that the record has no source: the per-source counts
	// never hold a partition.
	SourceKey KeyFunc
	// Sources returns a new SourceTally; the worker keeps one per partition goroutine and flushes
	// it after every batch. Required with SourceKey, ignored without.
	Sources func() SourceTally

	// ShutdownTimeout bounds the drain after Run's context is cancelled. Required.
	ShutdownTimeout time.Duration
	// ProduceTimeout bounds one produce request, and the other requests of the Worker and the
	// OutputReader that have no bound of their own (fetches and group membership requests have
	// theirs): it is the timeout of their Kafka client. Required.
	ProduceTimeout time.Duration
	// RetryBackoffMax caps the backoff between retries of produce requests, metadata lookups,
	// Assign calls and identity extractions. Required.
	RetryBackoffMax time.Duration
	// IdentityHold is how long a partition may be held at a record whose identity cannot be
	// extracted for a temporary reason (the schema registry is down) before the worker reports
	// not ready. The partition is held, and retried, for as long as it takes either way.
	// Required.
	IdentityHold time.Duration
}

// conn returns the connection settings of c for kafkaio.
func (c Config) conn() kafkaio.Conn {
	k := kafkaio.Conn{Brokers: c.Brokers, ClientID: c.ClientID, TLS: c.TLS}
	if c.SASL != nil { // not a typed nil in the interface
		k.SASL = c.SASL.mech
	}
	return k
}

// isolation returns c.Isolation as kafkaio's.
func (c Config) isolation() kafkaio.Isolation { return kafkaio.Isolation(c.Isolation) }

// releaseBudget returns how long a partition may take, from the end of its generation, to drain,
// commit and hand its state back, so that its member rejoins before the group coordinator's
// rebalance timeout, which started when the rebalance began: RebalanceTimeout less the
// HeartbeatInterval that may pass before the member notices the rebalance, less a margin for the
// rejoin itself (RebalanceTimeout/10, at most one second).
func (c Config) releaseBudget() time.Duration {
	margin := min(c.RebalanceTimeout/10, time.Second)
	return c.RebalanceTimeout - c.HeartbeatInterval - margin
}

// ReleaseBudget returns how long a partition may take to be released at the end of a generation
// (see RebalanceTimeout).
func (c Config) ReleaseBudget() time.Duration { return c.releaseBudget() }

// retry returns the retry policy of c's Kafka requests and Deduper calls: kafkaio.Backoff capped at
// RetryBackoffMax.
func (c Config) retry() kafkaio.Backoff {
	return kafkaio.Backoff{Max: c.RetryBackoffMax}
}

// FieldError is one problem Validate found, naming the Config field at fault, so that a caller
// that fills Config from its own settings (internal/app from environment variables) can report the
// problem against the setting.
type FieldError struct {
	// Field is the name of the Config field at fault, such as "BatchSize".
	Field string
	// Problem says what is wrong without naming the field, such as "must be at least 1024, got 10".
	Problem string
}

// Error returns "consumer: <Field>: <Problem>".
func (e *FieldError) Error() string { return "consumer: " + e.Field + ": " + e.Problem }

// FieldErrors returns the FieldErrors that err (as returned by Validate) holds, in order.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		var fe *FieldError
		switch x := err.(type) {
		case nil:
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				walk(e)
			}
		default:
			if errors.As(err, &fe) {
				out = append(out, fe)
			}
		}
	}
	walk(err)
	return out
}

// Validate reports every problem of c as a *FieldError, joined into one error
// (see FieldErrors), or returns nil. It is the one definition of the rules of the Kafka side;
// internal/app reports its problems against the environment variables.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if len(c.Brokers) == 0 {
		bad("Brokers", "no brokers")
	}
	for _, b := range c.Brokers {
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			bad("Brokers", "%q is not host:port", b)
		}
	}
	if c.ClientID == "" {
		bad("ClientID", "no client id")
	}
	if c.GroupID == "" {
		bad("GroupID", "no group")
	}
	if c.GroupProtocol != GroupEager && c.GroupProtocol != GroupCooperative {
		bad("GroupProtocol", "%q is not one of %s, %s", c.GroupProtocol, GroupEager, GroupCooperative)
	}
	c.validateTopics(bad)
	if c.SourceKey != nil && c.Sources == nil {
		bad("Sources", "required with SourceKey")
	}
	positive := func(field string, d time.Duration) {
		if d <= 0 {
			bad(field, "must be positive, got %v", d)
		}
	}
	positive("SessionTimeout", c.SessionTimeout)
	positive("HeartbeatInterval", c.HeartbeatInterval)
	positive("RebalanceTimeout", c.RebalanceTimeout)
	if c.HeartbeatInterval > 0 && c.SessionTimeout > 0 && c.HeartbeatInterval >= c.SessionTimeout {
		bad("HeartbeatInterval", "%v must be shorter than the session timeout (%v)", c.HeartbeatInterval, c.SessionTimeout)
	}
	if c.HeartbeatInterval > 0 && c.RebalanceTimeout > 0 && c.releaseBudget() <= 0 {
		bad("RebalanceTimeout", "%v leaves no time to release partitions after the heartbeat interval (%v) that may pass before a rebalance is noticed",
			c.RebalanceTimeout, c.HeartbeatInterval)
	}
	if c.BatchSize < 1 || c.BatchSize > 1_000_000 {
		bad("BatchSize", "must be between 1 and 1000000, got %d", c.BatchSize)
	}
	atLeast := func(field string, v, lo int) {
		if v < lo {
			bad(field, "must be at least %d, got %d", lo, v)
		}
	}
	atLeast("BatchBytes", c.BatchBytes, 1024)
	atLeast("FetchMaxBytes", c.FetchMaxBytes, 1024)
	atLeast("DecodeMaxBytes", c.DecodeMaxBytes, 1024)
	positive("BatchTimeout", c.BatchTimeout)
	positive("FetchMaxWait", c.FetchMaxWait)
	positive("FetchFailingMax", c.FetchFailingMax)
	positive("ProgressInterval", c.ProgressInterval)
	positive("ShutdownTimeout", c.ShutdownTimeout)
	positive("ProduceTimeout", c.ProduceTimeout)
	positive("RetryBackoffMax", c.RetryBackoffMax)
	positive("IdentityHold", c.IdentityHold)
	if c.CommitInterval < 0 {
		bad("CommitInterval", "must not be negative, got %v", c.CommitInterval)
	}
	if !slices.Contains(kafkaio.Compressions(), kafkaio.Compression(c.Compression)) {
		bad("Compression", "%q is not one of %s", c.Compression, join(kafkaio.Compressions()))
	}
	c.validateEnums(bad)
	c.validateDelivery(bad)
	return errors.Join(errs...)
}

// validateTopics checks that the topics are set and distinct.
func (c Config) validateTopics(bad func(field, format string, args ...any)) {
	if c.InputTopic == "" {
		bad("InputTopic", "no input topic")
	}
	if c.OutputTopic == "" {
		bad("OutputTopic", "no output topic")
	}
	if c.InputTopic != "" && c.OutputTopic == c.InputTopic {
		bad("OutputTopic", "must differ from the input topic (%q): the worker would consume its own output", c.InputTopic)
	}
	if c.DuplicatesTopic != "" && (c.DuplicatesTopic == c.InputTopic || c.DuplicatesTopic == c.OutputTopic) {
		bad("DuplicatesTopic", "%q must differ from the input and output topics", c.DuplicatesTopic)
	}
	if c.DeadLetterTopic != "" && (c.DeadLetterTopic == c.InputTopic || c.DeadLetterTopic == c.OutputTopic ||
		c.DeadLetterTopic == c.DuplicatesTopic) {
		bad("DeadLetterTopic", "%q must differ from the input, output and duplicates topics", c.DeadLetterTopic)
	}
}

// validateDelivery checks the delivery guarantee and its transactions.
func (c Config) validateDelivery(bad func(field, format string, args ...any)) {
	switch c.Delivery {
	case DeliveryAtLeastOnce:
		return
	case DeliveryExactlyOnce:
	default:
		bad("Delivery", "%q is not one of %s, %s", c.Delivery, DeliveryAtLeastOnce, DeliveryExactlyOnce)
		return
	}
	if c.DisableIdempotence {
		bad("Delivery", "%s needs idempotent production; do not disable idempotence", c.Delivery)
	}
	if c.isolation() == kafkaio.ReadUncommitted {
		bad("Isolation", "%s needs %s: the re-warm must not read records of aborted transactions", c.Delivery, kafkaio.ReadCommitted)
	}
	if c.TxnMaxRecords < 1 {
		bad("TxnMaxRecords", "must be at least 1, got %d", c.TxnMaxRecords)
	}
	if c.TxnInterval <= 0 {
		bad("TxnInterval", "must be positive, got %v", c.TxnInterval)
	}
	if c.TxnTimeout < time.Second || c.TxnTimeout > 15*time.Minute {
		bad("TxnTimeout", "must be between 1s and 15m (the brokers' default transaction.max.timeout.ms), got %v", c.TxnTimeout)
	}
	if c.TxnTimeout > 0 && c.TxnInterval >= c.TxnTimeout {
		bad("TxnInterval", "%v must be shorter than the transaction timeout (%v)", c.TxnInterval, c.TxnTimeout)
	}
}

// validateEnums checks the enumerations and the mark header.
func (c Config) validateEnums(bad func(field, format string, args ...any)) {
	switch c.Partitioning {
	case PartitionSame, PartitionHash, PartitionIdentity:
	default:
		bad("Partitioning", "%q is not one of %s, %s, %s", c.Partitioning, PartitionSame, PartitionHash, PartitionIdentity)
	}
	if c.Route && c.Partitioning != PartitionIdentity {
		bad("Route", "needs partitioning %q: the route topic's partition must follow the identity", PartitionIdentity)
	}
	switch c.Mode {
	case ModeDrop, ModeMark:
	default:
		bad("Mode", "%q is not one of %s, %s", c.Mode, ModeDrop, ModeMark)
	}
	switch c.Unkeyed {
	case UnkeyedPass, UnkeyedDrop:
	default:
		bad("Unkeyed", "%q is not one of %s, %s", c.Unkeyed, UnkeyedPass, UnkeyedDrop)
	}
	switch c.DuplicatesContent {
	case AuditFull, AuditHeadersOnly:
	default:
		bad("DuplicatesContent", "%q is not one of %s, %s", c.DuplicatesContent, AuditFull, AuditHeadersOnly)
	}
	if c.Isolation == "" || !c.isolation().Valid() {
		bad("Isolation", "%q is not one of %s, %s", c.Isolation, kafkaio.ReadCommitted, kafkaio.ReadUncommitted)
	}
	if c.ProcessedHeader != "" && strings.TrimSpace(c.ProcessedHeader) == "" {
		bad("ProcessedHeader", "must not be blank")
	}
	if c.ProcessedHeader != "" && c.ProcessedHeader == c.MarkHeader {
		bad("ProcessedHeader", "must differ from MarkHeader")
	}
	if strings.TrimSpace(c.MarkHeader) == "" {
		bad("MarkHeader", "must not be blank")
	}
}

// join returns names joined with ", ".
func join[T ~string](names []T) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = string(n)
	}
	return strings.Join(out, ", ")
}

// SASL is a SASL mechanism for Config.SASL, made by NewSASL. It never prints its credentials
// (fmt's verbs print only the mechanism and the user). It is safe for concurrent use.
type SASL struct{ mech *kafkaio.SASL }

// SASLConfig is what a SASL mechanism needs: its name (any case) and the credentials.
type SASLConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or AWS_MSK_IAM, in any case.
	Mechanism string
	// Username and Password are the credentials of PLAIN and SCRAM.
	Username, Password string
	// AWSCredentials and AWSRegion sign AWS_MSK_IAM authentication; both are required with it.
	// The credentials are retrieved on every new connection.
	AWSCredentials aws.CredentialsProvider
	AWSRegion      string
}

// NewSASL returns the mechanism of c. The error (an unknown mechanism, credentials SCRAM cannot
// prepare, AWS_MSK_IAM without credentials or region) never holds a secret.
func NewSASL(c SASLConfig) (*SASL, error) {
	m, err := kafkaio.NewSASL(kafkaio.SASLConfig(c))
	if err != nil {
		return nil, err
	}
	return &SASL{mech: m}, nil
}

// String returns the mechanism and the user, such as `SASL PLAIN as "svc"`, never the
// credentials.
func (s *SASL) String() string { return s.mech.String() }

// Format prints what String returns, whatever the verb, so that no verb prints the credentials.
func (s *SASL) Format(f fmt.State, _ rune) { fmt.Fprint(f, s.String()) }
