package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/dedup"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// Config is everything kdedup reads from the environment. The struct tags are the single source
// of truth for variable names (env, envPrefix), defaults (envDefault) and documentation (desc):
// the README's configuration table is generated from them (EnvTable, go run ./cmd/kdedup envdoc).
// Leaf field names are unique across the sections, so parse errors can name their variable.
type Config struct {
	Kafka      KafkaConfig      `envPrefix:"KAFKA_"`
	Dedup      DedupConfig      `envPrefix:"DEDUP_"`
	Checkpoint CheckpointConfig `envPrefix:"CHECKPOINT_"`
	AWS        AWSConfig        `envPrefix:"AWS_"`
	Registry   RegistryConfig   `envPrefix:"SCHEMA_REGISTRY_"`

	HTTPAddr        string        `env:"HTTP_ADDR" envDefault:":8080" desc:"Listen address of the HTTP server: /healthz, /readyz and /metrics."`
	LogLevel        string        `env:"LOG_LEVEL" envDefault:"info" desc:"Minimum log level: debug, info, warn or error. Logs are JSON lines on stderr; nothing is logged per record at info."`
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"30s" desc:"On SIGTERM/SIGINT: time allowed to stop fetching, produce what is in flight, commit, save state and leave the group before exiting."`
	// GoMemLimit is read by the Go runtime itself; it is here to be documented and logged.
	GoMemLimit string `env:"GOMEMLIMIT" desc:"Soft limit of the memory the Go runtime manages, read by the Go runtime (bytes, or with a unit such as 1800MiB, or off): the garbage collector works harder as the heap nears it. Empty: the worker sets it, and moves it every second, to the input share of DEDUP_MEMORY_LIMIT plus 64MiB, less the binary's resident text (RssFile, about 23MiB), 4MiB for the collector's pacing and one fetch response frame (a quarter of the input share, 8MiB at most), so that the process stays within DEDUP_MEMORY_LIMIT plus 64MiB (the filters are mapped outside the Go heap, which the limit does not count) instead of the heap growing to twice what was live. Set, it is left alone (the chart sets 90% of the container's memory limit)."`
}

// KafkaConfig is the KAFKA_* section.
type KafkaConfig struct {
	Brokers           []string      `env:"BROKERS,required,notEmpty" envSeparator:"," desc:"Comma-separated bootstrap brokers, host:port."`
	InputTopic        string        `env:"INPUT_TOPIC,required,notEmpty" desc:"Topic to deduplicate. With DEDUP_SCOPE=routed, a comma-separated list of topics, deduplicated together (their partition counts may differ, and grow); the other scopes take one topic."`
	OutputTopic       string        `env:"OUTPUT_TOPIC,required,notEmpty" desc:"Topic the deduplicated stream is produced to. It must exist; kdedup never creates topics."`
	RouteTopic        string        `env:"ROUTE_TOPIC" desc:"With DEDUP_SCOPE=routed (required there, refused elsewhere): the topic the routers produce every input record to, at the partition of its identity, and the second stage deduplicates. It must exist with the output topic's partition count; kdedup never creates topics. The routers read each input topic TOPIC in the consumer group GROUP_ID-in-TOPIC, the second stage reads the route topic in GROUP_ID-route. See docs/design.md, Routed scope."`
	DeadLetterTopic   string        `env:"DEAD_LETTER_TOPIC" desc:"Optional topic for records the output (or duplicates) topic refuses for good: larger than its max.message.bytes, or invalid for it. Such a record is written there unchanged plus kdedup-* headers (error, source topic, partition and offset, refusing topic), and its partition goes on. Unset: the partition stops at the record (kdedup_partition_blocked) until the topic takes it. Input the worker refuses to decode (over KAFKA_DECODE_MAX_BYTES, or corrupt) is dead-lettered there too, as its coordinates and error without content. See docs/operations.md, Refused records and Refused input."`
	DuplicatesTopic   string        `env:"DUPLICATES_TOPIC" desc:"Optional audit topic: every record the worker drops is written there instead of disappearing: duplicates (also in DEDUP_MODE=mark), records without identity under DEDUP_UNKEYED_POLICY=drop, late records under DEDUP_LATE_RECORDS=drop. It keeps the record (see KAFKA_DUPLICATES_CONTENT) plus the headers kdedup-source-topic, kdedup-source-partition, kdedup-source-offset and kdedup-reason (duplicate, unkeyed, late, overload), in partition input partition modulo its partition count (the same number when the counts match). It must exist; kdedup never creates topics. Input offsets are committed only once the output and audit writes below them were acknowledged (in the same transaction under exactly-once). Replaces DEDUP_DUPLICATES_TOPIC. See docs/operations.md, The audit topic."`
	DuplicatesContent string        `env:"DUPLICATES_CONTENT" envDefault:"full" desc:"What an audit record keeps of the dropped record: full (key, value, headers and timestamp: a false positive can be re-injected) or headers (its headers and timestamp, without key and value, plus the kdedup-* headers: where and why, at a fraction of the volume)."`
	GroupID           string        `env:"GROUP_ID" envDefault:"kdedup" desc:"Consumer group. Replicas with the same group split the input partitions."`
	GroupInstanceID   string        `env:"GROUP_INSTANCE_ID" desc:"Static consumer group membership (KIP-345): a name unique to this replica and stable across its restarts, such as a StatefulSet pod name (letters, digits, '.', '_', '-'). A replica restarted within KAFKA_SESSION_TIMEOUT gets its partitions back with no rebalance; a stopping replica does not leave the group, so its partitions move only once its session expired. Two running replicas must never share one: the second fences the first, which exits. Empty (the default): a dynamic member, which leaves the group when it stops, so scale-in and scale-out move partitions at once."`
	GroupProtocol     string        `env:"GROUP_PROTOCOL" envDefault:"cooperative" desc:"How the consumer group rebalances: cooperative (KIP-429, the Java client's cooperative-sticky: a replica keeps consuming its partitions through a rebalance and gives up only those that move, which then move in a second, immediate rebalance) or eager (every replica releases every partition, with its final snapshot, and gets its assignment again). A group in which one replica does not offer cooperative (an older kdedup, during a rolling upgrade) rebalances eagerly until it is gone. See docs/operations.md, Scaling out."`
	ClientID          string        `env:"CLIENT_ID" envDefault:"kdedup" desc:"Client ID sent to the brokers."`
	StartOffset       string        `env:"START_OFFSET" envDefault:"earliest" desc:"Where a partition without a committed offset starts: earliest or latest."`
	Isolation         string        `env:"ISOLATION_LEVEL" envDefault:"read_committed" desc:"Which records of transactional producers are read, from the input topic and, for the rebuild and re-warm, the output topic: read_committed (records of committed transactions and non-transactional records, up to the last stable offset; aborted records are skipped, and a transaction left open holds the partition until it ends) or read_uncommitted (every record up to the high watermark, those of aborted and open transactions included). Transaction markers are never records in either."`
	SessionTimeout    time.Duration `env:"SESSION_TIMEOUT" envDefault:"10s" desc:"Consumer group session timeout: a replica that stops heartbeating for this long loses its partitions."`
	HeartbeatInterval time.Duration `env:"HEARTBEAT_INTERVAL" envDefault:"3s" desc:"Consumer group heartbeat interval; must be shorter than KAFKA_SESSION_TIMEOUT."`
	RebalanceTimeout  time.Duration `env:"REBALANCE_TIMEOUT" envDefault:"30s" desc:"How long the group waits for members to rejoin on a rebalance. It also bounds the release of a revoked partition (drain, commit, save its final snapshot): KAFKA_REBALANCE_TIMEOUT minus KAFKA_HEARTBEAT_INTERVAL minus a margin of a tenth (at most 1s); the worker keeps heartbeating meanwhile. Raise it when large filters go to a slow checkpoint store."`
	BatchSize         int           `env:"BATCH_SIZE" envDefault:"1000" desc:"Maximum records per partition processed and produced together (one produce request per output partition)."`
	BatchBytes        int           `env:"BATCH_BYTES" envDefault:"983040" desc:"Maximum bytes of one produce request; keep it below the brokers' message.max.bytes."`
	BatchTimeout      time.Duration `env:"BATCH_TIMEOUT" envDefault:"5ms" desc:"How long a partition waits to fill a batch once it has a record: the latency added for throughput."`
	CommitInterval    time.Duration `env:"COMMIT_INTERVAL" envDefault:"1s" desc:"How often acknowledged input offsets are committed (0: after every batch). A crash re-delivers at most this much; a graceful stop commits everything."`
	FetchMaxWait      time.Duration `env:"FETCH_MAX_WAIT" envDefault:"500ms" desc:"How long a fetch waits on the broker for new records when a partition is idle."`
	FetchFailingMax   time.Duration `env:"FETCH_FAILING_MAX" envDefault:"1m" desc:"How long an input partition's fetches may keep failing before the worker reports not ready (/readyz, kdedup_ready 0). The worker retries failed fetches by itself either way."`
	ProgressInterval  time.Duration `env:"PROGRESS_INTERVAL" envDefault:"5s" desc:"How often a partition whose records are not being taken (blocked at a refused record, or its output writes failing) looks up its offsets, so that its lag and kdedup_partition_blocked stay current."`
	FetchMaxBytes     int           `env:"FETCH_MAX_BYTES" envDefault:"4194304" desc:"Maximum bytes of one partition's part of a fetch response; the fetch per broker is capped at four times it, at a quarter of the input partitions' part of the input buffers' share of DEDUP_MEMORY_LIMIT (three quarters; the re-warm reads of the output topic have the other quarter), and at what the buffers in use leave of half that part. A batch larger than it is still read whole (a broker sends a partition's first batch whatever its size), up to 128 MiB past it."`
	DecodeMaxBytes    int           `env:"DECODE_MAX_BYTES" desc:"Cap on the decompressed records of one input record batch; a record's headers are capped at a 256th of it. A batch or record over it is refused input: dead-lettered (coordinates and error, not content) when KAFKA_DEAD_LETTER_TOPIC is set, else its partition blocks (kdedup_partition_blocked). Unset: four times KAFKA_FETCH_MAX_BYTES, at least 16 MiB. See docs/operations.md, Refused input."`
	Partitioning      string        `env:"PARTITIONING" envDefault:"same" desc:"Output partition of a record: same (the input partition's number; input and output partition counts must match) or hash (murmur2 of the key like Java's default partitioner; null keys go to input partition modulo the count)."`
	Compression       string        `env:"COMPRESSION" envDefault:"none" desc:"Compression of produced batches: none, gzip, snappy, lz4 or zstd."`
	ProduceTimeout    time.Duration `env:"PRODUCE_TIMEOUT" envDefault:"10s" desc:"Bound of one produce request, and of the worker's other requests to the brokers that have no bound of their own (fetches and the group membership requests have theirs); a request that takes longer fails and is retried."`
	RetryBackoffMax   time.Duration `env:"RETRY_BACKOFF_MAX" envDefault:"5s" desc:"Cap of the exponential backoff between retries of failed produce requests, metadata and offset lookups, partition assignments and identity extractions."`
	Idempotent        bool          `env:"IDEMPOTENT" envDefault:"true" desc:"Idempotent production (producer id and sequence numbers, as Kafka's Java producer does): a produce retry whose first attempt was written is not written twice. Needs Kafka 0.11+ and, with ACLs, IDEMPOTENT_WRITE on the cluster; kdedup exits at startup if the brokers refuse it. false: retries can duplicate records in the output."`
	Delivery          string        `env:"DELIVERY" envDefault:"at-least-once" desc:"What the output holds after crashes and rebalances. at-least-once: output written idempotently, input offsets committed after it; a crash can write the previous owner's last records twice. exactly-once: output written in Kafka transactions (one transactional id per input partition, GROUP_ID-INPUT_TOPIC-PARTITION, which fences the partition's previous owner) with the input offsets committed inside them; readers of the output must use isolation.level=read_committed. Needs Kafka 0.11+, KAFKA_IDEMPOTENT=true and KAFKA_ISOLATION_LEVEL=read_committed. See docs/design.md, Exactly-once delivery."`
	TxnMaxRecords     int           `env:"TXN_MAX_RECORDS" envDefault:"10000" desc:"Exactly-once: a partition's transaction is committed once it holds this many input records."`
	TxnInterval       time.Duration `env:"TXN_INTERVAL" envDefault:"100ms" desc:"Exactly-once: a partition's transaction is committed once its first record is this old; read_committed readers of the output see records this much later."`
	TxnTimeout        time.Duration `env:"TXN_TIMEOUT" envDefault:"1m" desc:"Exactly-once: the transaction timeout: the coordinator aborts a transaction left open this long. It bounds how long a crashed worker's open transaction holds read_committed readers when no new owner fences it sooner (the next owner does at once); at most the brokers' transaction.max.timeout.ms."`
	TLSEnabled        bool          `env:"TLS_ENABLED" envDefault:"false" desc:"Connect to the brokers with TLS."`
	TLSCAFile         string        `env:"TLS_CA_FILE" desc:"PEM file of the CA certificates that verify the brokers (default: the system pool). Needs KAFKA_TLS_ENABLED=true."`
	TLSCertFile       string        `env:"TLS_CERT_FILE" desc:"PEM client certificate for mutual TLS, with KAFKA_TLS_KEY_FILE. Needs KAFKA_TLS_ENABLED=true."`
	TLSKeyFile        string        `env:"TLS_KEY_FILE" desc:"PEM private key of KAFKA_TLS_CERT_FILE."`
	TLSServerName     string        `env:"TLS_SERVER_NAME" desc:"Name the brokers' certificates are verified against, for brokers reached through an address their certificates do not hold (a proxy, a tunnel, an IP address). Empty: the host of each broker address. Needs KAFKA_TLS_ENABLED=true."`
	SASLMechanism     string        `env:"SASL_MECHANISM" desc:"SASL mechanism, any case: empty (none), PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (with KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD) or AWS_MSK_IAM (signed with the AWS credentials the S3 checkpoint store uses: AWS_ACCESS_KEY_ID, else the SDK's default chain such as EKS IRSA or the instance role; region AWS_REGION). Use it with KAFKA_TLS_ENABLED=true: PLAIN sends the password as is."`
	SASLUsername      string        `env:"SASL_USERNAME" secret:"true" desc:"SASL user name (shown in authentication errors)."`
	SASLPassword      string        `env:"SASL_PASSWORD" secret:"true" desc:"SASL password (never logged)."`
}

// DedupConfig is the DEDUP_* section.
type DedupConfig struct {
	Key                       string        `env:"KEY" envDefault:"key" desc:"Identity of a record: key (the Kafka key), value (the whole value), header:NAME (the first header NAME), json:PATH (a dotted path into a JSON object value, such as json:meta.id), avro:PATH or protobuf:PATH (a dotted path of field names into an Avro record or Protobuf message value in Confluent's wire format, with SCHEMA_REGISTRY_URL; avro-key:PATH and protobuf-key:PATH read the Kafka key). Snapshots record it: a snapshot of another identity is rebuilt, not restored."`
	Scope                     string        `env:"SCOPE" envDefault:"partition" desc:"partition: one filter per input partition, which moves with the partition between replicas; duplicates are caught within a partition. global: one filter for all partitions, catching duplicates across partitions; only for a single replica. routed: duplicates across partitions and topics on any number of replicas: every record is produced to KAFKA_ROUTE_TOPIC at the partition of its identity, and each route partition is deduplicated as with partition (each record crosses the brokers twice). See docs/design.md, Routed scope."`
	Mode                      string        `env:"MODE" envDefault:"drop" desc:"drop: duplicates are not produced. mark: every record is produced and duplicates carry the DEDUP_MARK_HEADER header with value 1."`
	MarkHeader                string        `env:"MARK_HEADER" envDefault:"kdedup-duplicate" desc:"Header added (value \"1\") to duplicates in mark mode, after the record's own headers."`
	ProcessedHeader           string        `env:"PROCESSED_HEADER" desc:"With DEDUP_WINDOW_CLOCK=processing: a header added to every output record holding when it was processed (8 bytes, big-endian Unix milliseconds; before the mark header). A rebuild then finds what this stage produced in the last window by that time, also after a catch-up with more lag than the window, when the records' own timestamps (the input's) all lie before it. Empty (the default): no header, and such a rebuild reads only records stamped within the window, and counts in kdedup_rebuilds_by_record_time_total. See docs/design.md, Failure model."`
	DeprecatedDuplicatesTopic string        `env:"DUPLICATES_TOPIC" desc:"Deprecated: the former name of KAFKA_DUPLICATES_TOPIC, still read (with a warning at startup). Setting both to different topics is an error."`
	Unkeyed                   string        `env:"UNKEYED_POLICY" envDefault:"pass" desc:"Records that have no identity for a permanent reason (no key, header missing, value not JSON, path missing or null, no Confluent wire format header, a schema id the registry does not know, a path the record's schema lacks): pass (produce without deduplicating) or drop. Counted in kdedup_records_unkeyed_total and, by reason, kdedup_records_unkeyed_by_reason_total either way. A schema registry that cannot be reached never makes a record unkeyed: the partition waits for it."`
	IdentityHold              time.Duration `env:"IDENTITY_HOLD" envDefault:"30s" desc:"How long a partition may wait at a record whose identity cannot be extracted for a temporary reason (the schema registry cannot be reached) before the worker reports not ready (/readyz, kdedup_ready 0). The partition waits, and retries, for as long as it takes either way."`
	WindowCount               int           `env:"WINDOW_COUNT" envDefault:"8" desc:"Number of rotating generations of the sliding window. An identity is remembered for at least (count-1) x interval and at most count x interval: 1h45m-2h with the defaults."`
	WindowInterval            time.Duration `env:"WINDOW_INTERVAL" envDefault:"15m" desc:"Length of one generation. Generations rotate on the clock DEDUP_WINDOW_CLOCK names."`
	WindowClock               string        `env:"WINDOW_CLOCK" envDefault:"processing" desc:"Which time the window follows. processing: the worker's wall clock; a replay or catch-up pushes hours of data through a window of minutes. event: the records' Kafka timestamps; each filter's stream time is the highest timestamp it has seen (per partition with DEDUP_SCOPE=partition, shared with global), and an identity goes to the generation of its record's timestamp. See docs/design.md, Which window clock."`
	LateRecords               string        `env:"LATE_RECORDS" envDefault:"pass" desc:"With DEDUP_WINDOW_CLOCK=event: a record stamped before its filter's oldest live generation cannot be judged. pass: produce it as new; drop: treat it as a duplicate (dropped, or marked under DEDUP_MODE=mark). Counted in kdedup_filter_late_records_total either way."`
	EventTimeMaxAhead         time.Duration `env:"EVENT_TIME_MAX_AHEAD" envDefault:"1h" desc:"With DEDUP_WINDOW_CLOCK=event: how far ahead of the worker's wall clock a record's timestamp may move stream time. A record stamped later (a producer's clock off) is judged as if stamped at the cap, so it cannot expire the window."`
	WindowCapacity            Capacity      `env:"WINDOW_CAPACITY" envDefault:"auto" desc:"auto: each generation is sized from the load observed (the distinct identities the previous generation took and the rate of the current one, with 25% headroom), starting from a few KiB per filter, so memory follows the load (kdedup_filter_generation_keys); see docs/design.md, Auto sizing. A number: the expected distinct identities per interval, per partition with DEDUP_SCOPE=partition, the size of each generation's first stage, not a hard limit. Either way a generation that takes more grows by stages at tighter rates, so the false-positive rate stays at target while DEDUP_MEMORY_LIMIT allows (kdedup_filter_stages)."`
	FalsePositiveRate         float64       `env:"FALSE_POSITIVE_RATE" envDefault:"1e-6" desc:"Target probability over the whole window that a new identity is wrongly taken for a duplicate (and dropped)."`
	MemoryLimit               ByteSize      `env:"MEMORY_LIMIT" envDefault:"0" desc:"Memory budget of all the worker's filters together (every assigned partition's with DEDUP_SCOPE=partition, the one filter with global), in bytes; suffixes KiB, MiB, GiB, KB, MB, GB accepted. 0: half the container's memory limit (cgroup v2 memory.max, else v1 memory.limit_in_bytes), or 4GiB where there is none. A filter takes its first stages from it when it is created or restored and each stage it grows past DEDUP_WINDOW_CAPACITY, so the busiest partitions grow furthest; rotation and unassignment give memory back. When a growth does not fit, the generation stops growing and DEDUP_OVERLOAD_POLICY applies (kdedup_filter_at_memory_cap, kdedup_memory_budget_refusals_total). Startup fails if one filter's first stages need more (a few KiB per filter with DEDUP_WINDOW_CAPACITY=auto, about 39MB with 1000000); first stages are taken even past the budget, so that every assigned partition is served (kdedup_memory_budget_used_bytes then exceeds kdedup_memory_budget_bytes). It covers the filters and the input buffers of the fetches: those take a quarter of it, at most 32MiB (requests ask for no more than is free), and the filters share the rest. The rest of the process (Go runtime and collector headroom, decoded records in hand, producer, checkpoint writes, HTTP) needs up to 64MiB more: size the container for the budget plus 64MiB. Without GOMEMLIMIT the worker sets the Go runtime's soft memory limit from it (see GOMEMLIMIT)."`
	RemovedMaxMemory          string        `env:"MAX_MEMORY" desc:"Removed: it was the memory cap of each filter, replaced by DEDUP_MEMORY_LIMIT, one budget for all the worker's filters. Startup fails while it is set: set DEDUP_MEMORY_LIMIT instead (about the number of partitions per worker times the old value holds as much)."`
	OverloadPolicy            string        `env:"OVERLOAD_POLICY" envDefault:"drop" desc:"What a filter that DEDUP_MEMORY_LIMIT stops from growing does with new identities once its last stage is full. drop: keep adding them; every identity is remembered but the false-positive rate rises above target, so unique records may be dropped as duplicates. pass: stop adding them; the rate stays at target, and a later duplicate of an identity that was not added passes."`
	HashSeed                  uint64        `env:"HASH_SEED" envDefault:"0" secret:"true" desc:"Seed of the identity hash. Set a secret value if producers could craft colliding identities (see docs/design.md, Hostile producers). Checkpoints hold only a fingerprint of it, which kdedup inspect shows."`

	// Window counted from the last sighting (window.Filter.TestAndRefresh).
	WindowRefresh bool `env:"WINDOW_REFRESH" envDefault:"false" desc:"true: a duplicate re-arms its identity in the current generation (with DEDUP_WINDOW_CLOCK=event, the generation of its timestamp), so the window counts from an identity's last sighting: remembered at least (count-1) x interval and at most count x interval after it. An identity re-sent forever then never passes again. Each re-armed identity counts against DEDUP_WINDOW_CAPACITY once per interval, and a duplicate costs a write (kdedup_filter_refreshes_total). false: the window counts from the first sighting."`

	// Per-source metrics (metrics.Sources).
	MetricsSource      string        `env:"METRICS_SOURCE" desc:"Where a record's source (producer, tenant, library) is read for kdedup_source_records_total and kdedup_source_duplicates_total: the forms of DEDUP_KEY (key, value, header:NAME, json:PATH, avro:PATH, protobuf:PATH and their -key forms; a record whose source cannot be read for now counts as none) or key-prefix:SEP (the Kafka key up to the first SEP). Empty: no per-source metrics, and no cost. See docs/operations.md, Duplicates by source."`
	MetricsSourceLimit int           `env:"METRICS_SOURCE_LIMIT" envDefault:"50" desc:"With DEDUP_METRICS_SOURCE: the most sources with a source label of their own (the heaviest, found by a heavy-hitters sketch); the others count as source=\"other\", records without a source as source=\"none\". At most 1000."`
	MetricsSourceHold  time.Duration `env:"METRICS_SOURCE_HOLD" envDefault:"10s" desc:"With DEDUP_METRICS_SOURCE: how long the records of a source without a label of its own wait, uncounted, for the source to earn one; then they count as source=\"other\". A source that outgrows the smallest label within it is counted exactly from its first record; the sum of the sources lags the records by up to it. Between 100ms and 10m."`
}

// CheckpointConfig is the CHECKPOINT_* section.
type CheckpointConfig struct {
	URL               string        `env:"URL" desc:"Where filter snapshots are kept, so a restarted or rebalanced worker keeps its window: file:///path (a directory, possibly a shared volume) or s3://bucket/prefix (S3 or an S3-compatible store; see the AWS_* variables). Empty, with CHECKPOINT_DIR empty too, disables checkpoints (state starts empty)."`
	Dir               string        `env:"DIR" desc:"Shorthand for CHECKPOINT_URL=file://DIR (a relative path is taken from the working directory). Set one of the two; both only if they name the same directory."`
	Interval          time.Duration `env:"INTERVAL" envDefault:"1m" desc:"How often filters are snapshotted to the checkpoint store, besides on partition revoke and shutdown."`
	Keep              int           `env:"KEEP" envDefault:"3" desc:"Snapshots kept per unit (partition, or global); older ones are pruned. A corrupt newest snapshot falls back to the previous one."`
	SigningKey        string        `env:"SIGNING_KEY" secret:"true" desc:"Key (at least 32 bytes) that authenticates checkpoints: every manifest saved carries an HMAC-SHA256 with it and the SHA-256 of each generation object it references, and a restore refuses a snapshot that is unsigned (including every snapshot of format version 6 or older), signed with another key, or whose objects differ (kdedup_checkpoint_rejected_total reasons unsigned, bad_signature), falling back to an older snapshot or a rebuild. Set it when others may write the checkpoint store (see docs/checkpoints.md, Signing). Empty: checkpoints are neither signed nor checked."`
	RebuildMaxRecords int64         `env:"REBUILD_MAX_RECORDS" envDefault:"10000000" desc:"A partition with no usable snapshot (no store, per-pod disks, lost bucket, first start, snapshot of an incompatible configuration) is rebuilt from the output records of the last (DEDUP_WINDOW_COUNT-1) x DEDUP_WINDOW_INTERVAL (before the wall clock, or with DEDUP_WINDOW_CLOCK=event before the newest output record's timestamp), found by record timestamp, reading at most this many records; the worker is not ready meanwhile. Past the bound the oldest records of the window are skipped: their duplicates can pass until they would have left the window; the rebuild logs a warning and counts them in kdedup_rebuild_skipped_records_total. 0 disables the rebuild (such a partition starts empty). Not done under KAFKA_PARTITIONING=hash with DEDUP_SCOPE=partition, where every output partition mixes all input partitions."`
}

// AWSConfig is the AWS_* section: the standard AWS variables kdedup itself reads for an s3://
// CHECKPOINT_URL. The AWS SDK's default chain also reads the others (AWS_PROFILE,
// AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN, AWS_CONTAINER_CREDENTIALS_*, AWS_MAX_ATTEMPTS,
// AWS_CA_BUNDLE, ...) and ~/.aws itself: the one exception to cmd/kdedup being the only reader of
// the environment.
type AWSConfig struct {
	Region          string `env:"REGION" desc:"Region of the s3:// CHECKPOINT_URL bucket, and of the MSK cluster with KAFKA_SASL_MECHANISM=AWS_MSK_IAM. Empty: the AWS SDK's chain (AWS_DEFAULT_REGION, the shared profile), else us-east-1."`
	AccessKeyID     string `env:"ACCESS_KEY_ID" secret:"true" desc:"Static access key for an s3:// CHECKPOINT_URL, with AWS_SECRET_ACCESS_KEY. Empty: the AWS SDK's default chain (web identity as with EKS IRSA, container credentials, shared profiles, EC2 instance profile)."`
	SecretAccessKey string `env:"SECRET_ACCESS_KEY" secret:"true" desc:"Secret of AWS_ACCESS_KEY_ID (never logged)."`
	SessionToken    string `env:"SESSION_TOKEN" secret:"true" desc:"Session token of temporary AWS_ACCESS_KEY_ID credentials (never logged)."`
	EndpointURLS3   string `env:"ENDPOINT_URL_S3" desc:"Endpoint of an S3-compatible store (MinIO, R2, Ceph, moto), such as http://minio:9000; objects are then addressed path-style (endpoint/bucket/key). Empty: AWS S3."`
	EndpointURL     string `env:"ENDPOINT_URL" desc:"Endpoint for all AWS services; used for S3 (path-style) when AWS_ENDPOINT_URL_S3 is empty."`
}

// ByteSize is a number of bytes that parses "1048576", "512MiB", "2GiB", "500MB".
type ByteSize uint64

// UnmarshalText parses a byte size.
func (b *ByteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	units := []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := uint64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a byte size (like 1073741824, 512MiB or 2GiB)", text)
	}
	if n != 0 && n*mult/mult != n {
		return fmt.Errorf("%q overflows", text)
	}
	*b = ByteSize(n * mult)
	return nil
}

// Capacity is DEDUP_WINDOW_CAPACITY: a number of distinct identities per interval, or 0 for
// "auto" (window.Config.Auto).
type Capacity uint64

// UnmarshalText parses "auto" or a positive number.
func (c *Capacity) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	if strings.EqualFold(s, "auto") {
		*c = 0
		return nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return fmt.Errorf("%q is neither auto nor a positive number of identities", text)
	}
	*c = Capacity(n)
	return nil
}

// String returns "auto" or the number.
func (c Capacity) String() string {
	if c == 0 {
		return "auto"
	}
	return strconv.FormatUint(uint64(c), 10)
}

// ConfigError lists every configuration problem, one per line, each naming its variable.
type ConfigError struct {
	Problems []string
}

func (e *ConfigError) Error() string {
	return "invalid configuration:\n  " + strings.Join(e.Problems, "\n  ")
}

// Load parses environ (as from env.ToMap(os.Environ())) into a Config and validates it, with the
// secret variables read from their NAME_FILE files (ResolveFiles). It returns a *ConfigError with
// all problems at once.
func Load(environ map[string]string) (Config, error) {
	var cfg Config
	environ, problems := ResolveFiles(environ)
	failed := map[string]bool{} // variables whose value did not parse: no further checks
	if err := env.ParseWithOptions(&cfg, env.Options{Environment: environ}); err != nil {
		vars := fieldVars()
		var agg env.AggregateError
		errs := []error{err}
		if errors.As(err, &agg) {
			errs = agg.Errors
		}
		for _, e := range errs {
			name, msg := describeEnvError(e, vars, environ)
			failed[name] = true
			problems = append(problems, name+": "+msg)
		}
	}
	for _, p := range cfg.validate() {
		if !failed[p.name] {
			problems = append(problems, p.name+": "+p.msg)
		}
	}
	if len(problems) > 0 {
		return cfg, &ConfigError{Problems: problems}
	}
	return cfg, nil
}

// describeEnvError turns one caarlos0/env error into the variable it concerns and a message.
func describeEnvError(err error, vars map[string]string, environ map[string]string) (name, msg string) {
	var notSet env.VarIsNotSetError
	var empty env.EmptyVarError
	var parse env.ParseError
	switch {
	case errors.As(err, &notSet):
		return notSet.Key, "required but not set"
	case errors.As(err, &empty):
		return empty.Key, "must not be empty"
	case errors.As(err, &parse):
		name = vars[parse.Name]
		if name == "" {
			name = parse.Name
		}
		inner := parse.Err
		var ne *strconv.NumError
		if errors.As(inner, &ne) { // strconv repeats the input; keep the reason
			inner = ne.Err
		}
		if slices.Contains(SecretVars(), name) {
			return name, fmt.Sprintf("cannot parse the value: %v", inner) // never show a secret
		}
		return name, fmt.Sprintf("cannot parse %q: %v", environ[name], inner)
	}
	return "environment", err.Error()
}

// fieldVars maps every leaf field name of Config to its environment variable.
func fieldVars() map[string]string {
	out := map[string]string{}
	for _, v := range EnvVars() {
		out[v.Field] = v.Name
	}
	return out
}

// EnvVar describes one environment variable of Config. Secret is set for the fields tagged
// secret:"true": their value is never shown and may come from a file (NAME_FILE, ResolveFiles).
type EnvVar struct {
	Name, Field, Default, Desc string
	Required, HasDefault       bool
	Secret                     bool
}

// EnvVars lists Config's environment variables in declaration order. The names (with their
// section prefixes), defaults and required flags are what caarlos0/env itself parses
// (env.GetFieldParams); the Go field name and the desc tag, which env does not report, come from
// the leaf field at the same position. It panics if the two disagree: the tags are static, and
// every test that renders the table would catch it.
func EnvVars() []EnvVar {
	params, err := env.GetFieldParams(&Config{})
	if err != nil {
		panic("kdedup: Config's env tags: " + err.Error())
	}
	fields := envFields(reflect.TypeFor[Config]())
	if len(fields) != len(params) {
		panic(fmt.Sprintf("kdedup: Config has %d env fields, caarlos0/env reports %d", len(fields), len(params)))
	}
	out := make([]EnvVar, len(params))
	for i, p := range params {
		f := fields[i]
		if own, _, _ := strings.Cut(f.Tag.Get("env"), ","); own != p.OwnKey {
			panic(fmt.Sprintf("kdedup: field %s is %s, caarlos0/env reports %s", f.Name, own, p.OwnKey))
		}
		out[i] = EnvVar{
			Name: p.Key, Field: f.Name, Default: p.DefaultValue, HasDefault: p.HasDefaultValue,
			Desc: f.Tag.Get("desc"), Required: p.Required, Secret: f.Tag.Get("secret") == "true",
		}
	}
	return out
}

// envFields returns the fields of t that have an env tag, in declaration order, descending into
// the sections (the struct fields without one): the order of env.GetFieldParams.
func envFields(t reflect.Type) []reflect.StructField {
	var out []reflect.StructField
	for f := range t.Fields() {
		switch {
		case f.Tag.Get("env") != "":
			out = append(out, f)
		case f.Type.Kind() == reflect.Struct:
			out = append(out, envFields(f.Type)...)
		}
	}
	return out
}

type problem struct{ name, msg string }

// validate checks what parsing cannot: ranges, enumerations, files, cross-field rules. The rules of
// the worker's settings are consumer.Config.Validate's and those of the key, scope and window
// sizing are dedup's and window's (validateDedup); validate reports them against the variables.
func (c Config) validate() []problem {
	var ps []problem
	add := func(name, format string, args ...any) { ps = append(ps, problem{name, fmt.Sprintf(format, args...)}) }
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			add(name, "must be positive, got %v", d)
		}
	}
	vars := fieldVars()
	for _, fe := range consumer.FieldErrors(c.consumerFields().Validate()) {
		name := vars[fe.Field]
		if name == "" {
			name = "worker setting " + fe.Field
		}
		add(name, "%s", fe.Problem)
	}
	c.Kafka.validateClient(add)
	if mech, _ := kafkaio.CanonicalMechanism(c.Kafka.SASLMechanism); mech == kafkaio.MechanismAWSMSKIAM {
		if _, err := c.Kafka.SASL(c.AWS); err != nil {
			add("KAFKA_SASL_MECHANISM", "%v", err)
		}
	}

	d := c.Dedup
	if d.DeprecatedDuplicatesTopic != "" && c.Kafka.DuplicatesTopic != "" && d.DeprecatedDuplicatesTopic != c.Kafka.DuplicatesTopic {
		add("DEDUP_DUPLICATES_TOPIC", "%q differs from KAFKA_DUPLICATES_TOPIC (%q): DEDUP_DUPLICATES_TOPIC is the deprecated name of KAFKA_DUPLICATES_TOPIC; unset it",
			d.DeprecatedDuplicatesTopic, c.Kafka.DuplicatesTopic)
	}
	if d.WindowCount < 1 {
		add("DEDUP_WINDOW_COUNT", "must be at least 1, got %d", d.WindowCount)
	}
	if d.ProcessedHeader != "" && d.WindowClock != string(dedup.ClockProcessing) {
		add("DEDUP_PROCESSED_HEADER", "only with DEDUP_WINDOW_CLOCK=processing (the event clock places records by their own timestamps), got %q", d.WindowClock)
	}
	positive("DEDUP_WINDOW_INTERVAL", d.WindowInterval)
	positive("DEDUP_EVENT_TIME_MAX_AHEAD", d.EventTimeMaxAhead)
	if !(d.FalsePositiveRate > 0 && d.FalsePositiveRate < 1) {
		add("DEDUP_FALSE_POSITIVE_RATE", "must be between 0 and 1 (exclusive), got %v", d.FalsePositiveRate)
	}
	if d.RemovedMaxMemory != "" {
		add("DEDUP_MAX_MEMORY", "was the memory cap of each filter and is removed: DEDUP_MEMORY_LIMIT is one budget for all the worker's filters; unset DEDUP_MAX_MEMORY and set DEDUP_MEMORY_LIMIT (about the number of partitions per worker times %q holds as much)", d.RemovedMaxMemory)
	}
	if d.OverloadPolicy != "drop" && d.OverloadPolicy != "pass" {
		add("DEDUP_OVERLOAD_POLICY", "%q is not one of drop, pass", d.OverloadPolicy)
	}
	ps = append(ps, validateDedup(d)...) // key spec, scope and window sizing, by the packages that own them
	c.Kafka.validateRouted(d.Scope, c.Kafka.duplicatesTopic(d), add)
	c.validateRegistry(add)

	ps = append(ps, validateCheckpoint(c.Checkpoint, c.AWS)...) // the store URL, by the checkpoint package
	if c.Checkpoint.RebuildMaxRecords < 0 {
		add("CHECKPOINT_REBUILD_MAX_RECORDS", "must be >= 0 (0 disables the rebuild), got %d", c.Checkpoint.RebuildMaxRecords)
	}
	if k := c.Checkpoint.SigningKey; k != "" && len(k) < dedup.MinSigningKey {
		add("CHECKPOINT_SIGNING_KEY", "must be at least %d bytes, got %d", dedup.MinSigningKey, len(k))
	}
	if c.Checkpoint.URL != "" || c.Checkpoint.Dir != "" {
		positive("CHECKPOINT_INTERVAL", c.Checkpoint.Interval)
		if c.Checkpoint.Keep < 1 {
			add("CHECKPOINT_KEEP", "must be >= 1, got %d", c.Checkpoint.Keep)
		}
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		add("HTTP_ADDR", "%q is not a listen address like :8080", c.HTTPAddr)
	}
	if _, err := c.Level(); err != nil {
		add("LOG_LEVEL", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	return ps
}

// validateClient checks the settings that only this package turns into the worker's: the start
// offset, TLS files and SASL.
func (k KafkaConfig) validateClient(add func(name, format string, args ...any)) {
	if id := k.GroupInstanceID; id != "" && (len(id) > 249 || strings.ContainsFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	})) {
		add("KAFKA_GROUP_INSTANCE_ID", "%q is not a group instance id: at most 249 letters, digits, '.', '_' and '-'", id)
	}
	if k.GroupProtocol != string(consumer.GroupEager) && k.GroupProtocol != string(consumer.GroupCooperative) {
		add("KAFKA_GROUP_PROTOCOL", "%q is not one of %s, %s", k.GroupProtocol, consumer.GroupEager, consumer.GroupCooperative)
	}
	if k.StartOffset != "earliest" && k.StartOffset != "latest" {
		add("KAFKA_START_OFFSET", "%q is not one of earliest, latest", k.StartOffset)
	}
	if !k.TLSEnabled {
		for name, v := range map[string]string{"KAFKA_TLS_CA_FILE": k.TLSCAFile, "KAFKA_TLS_CERT_FILE": k.TLSCertFile, "KAFKA_TLS_KEY_FILE": k.TLSKeyFile} {
			if v != "" {
				add(name, "is set but KAFKA_TLS_ENABLED is false")
			}
		}
	} else if _, name, err := k.TLSConfig(); err != nil {
		add(name, "%v", err)
	}
	if !k.TLSEnabled && k.TLSServerName != "" {
		add("KAFKA_TLS_SERVER_NAME", "is set but KAFKA_TLS_ENABLED is false")
	}
	k.validateSASL(add)
}

// validateSASL checks KAFKA_SASL_*: a known mechanism and the credentials it needs.
func (k KafkaConfig) validateSASL(add func(name, format string, args ...any)) {
	if k.SASLMechanism == "" {
		if k.SASLUsername != "" || k.SASLPassword != "" {
			add("KAFKA_SASL_MECHANISM", "must be set when KAFKA_SASL_USERNAME or KAFKA_SASL_PASSWORD is (one of %s)", strings.Join(kafkaio.Mechanisms, ", "))
		}
		return
	}
	mech, ok := kafkaio.CanonicalMechanism(k.SASLMechanism)
	if !ok {
		add("KAFKA_SASL_MECHANISM", "%q is not one of %s", k.SASLMechanism, strings.Join(kafkaio.Mechanisms, ", "))
		return
	}
	if mech == kafkaio.MechanismAWSMSKIAM {
		for name, v := range map[string]string{"KAFKA_SASL_USERNAME": k.SASLUsername, "KAFKA_SASL_PASSWORD": k.SASLPassword} {
			if v != "" {
				add(name, "not used with KAFKA_SASL_MECHANISM=AWS_MSK_IAM, which signs with the AWS credentials (AWS_* or the SDK's default chain); unset it")
			}
		}
		if !k.TLSEnabled {
			add("KAFKA_SASL_MECHANISM", "AWS_MSK_IAM needs KAFKA_TLS_ENABLED=true (MSK serves IAM on its TLS listener, port 9098)")
		}
		return
	}
	if k.SASLUsername == "" {
		add("KAFKA_SASL_USERNAME", "required with KAFKA_SASL_MECHANISM=%s", mech)
	}
	if k.SASLPassword == "" {
		add("KAFKA_SASL_PASSWORD", "required with KAFKA_SASL_MECHANISM=%s", mech)
	}
	if k.SASLUsername != "" && k.SASLPassword != "" {
		if _, err := k.SASL(AWSConfig{}); err != nil {
			add("KAFKA_SASL_PASSWORD", "%v", err)
		}
	}
}

// Level returns LOG_LEVEL as a slog level; the error reports a name that is not one.
func (c Config) Level() (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(c.LogLevel))
	return l, err
}

// TLSConfig returns the TLS configuration, or nil when TLS is disabled. On failure it also
// returns the variable at fault.
func (k KafkaConfig) TLSConfig() (*tls.Config, string, error) {
	if !k.TLSEnabled {
		return nil, "", nil
	}
	return tlsFiles("KAFKA_TLS_", k.TLSCAFile, k.TLSCertFile, k.TLSKeyFile, k.TLSServerName)
}

// tlsFiles returns the TLS configuration of the PEM files of the settings prefix+CA_FILE,
// CERT_FILE and KEY_FILE (each may be empty) and a server name. On failure it also returns the
// variable at fault.
func tlsFiles(prefix, caFile, certFile, keyFile, serverName string) (*tls.Config, string, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, prefix + "CA_FILE", err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, prefix + "CA_FILE", fmt.Errorf("%s holds no PEM certificate", caFile)
		}
		tc.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, prefix + "CERT_FILE", fmt.Errorf("%sCERT_FILE and %sKEY_FILE must be set together", prefix, prefix)
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, prefix + "CERT_FILE", err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, "", nil
}

// SASL returns the SASL mechanism of KAFKA_SASL_* (see SASLConfig), or nil without one. The
// error (an unknown mechanism, credentials SCRAM cannot prepare, no AWS region) never holds a
// secret.
func (k KafkaConfig) SASL(a AWSConfig) (*consumer.SASL, error) {
	if k.SASLMechanism == "" {
		return nil, nil
	}
	c, err := k.SASLConfig(a)
	if err != nil {
		return nil, err
	}
	return consumer.NewSASL(c)
}

// SASLConfig returns the SASL settings of KAFKA_SASL_*, for a KAFKA_SASL_MECHANISM that is set.
// AWS_MSK_IAM signs with the AWS configuration of a (checkpoint.LoadAWSConfig: the chain the S3
// checkpoint store uses); its region is AWS_REGION, else the SDK's (AWS_DEFAULT_REGION, the
// shared profile). The error (no AWS region, an AWS configuration that does not load) never
// holds a secret.
func (k KafkaConfig) SASLConfig(a AWSConfig) (consumer.SASLConfig, error) {
	c := consumer.SASLConfig{Mechanism: k.SASLMechanism, Username: k.SASLUsername, Password: k.SASLPassword}
	if mech, _ := kafkaio.CanonicalMechanism(k.SASLMechanism); mech == kafkaio.MechanismAWSMSKIAM {
		opts := s3Options(a, nil)
		opts.Endpoint = ""
		ac, err := checkpoint.LoadAWSConfig(context.Background(), opts)
		if err != nil {
			return c, err
		}
		if ac.Region == "" {
			return c, errors.New("AWS_MSK_IAM needs the cluster's region: set AWS_REGION")
		}
		c.AWSCredentials, c.AWSRegion = ac.Credentials, ac.Region
	}
	return c, nil
}

// decodeMaxBytes returns KAFKA_DECODE_MAX_BYTES, or when it is unset (or 0) its default, which
// follows KAFKA_FETCH_MAX_BYTES (kafkaio.DefaultDecodeMaxBytes).
func (k KafkaConfig) decodeMaxBytes() int {
	if k.DecodeMaxBytes == 0 {
		return kafkaio.DefaultDecodeMaxBytes(k.FetchMaxBytes)
	}
	return k.DecodeMaxBytes
}

// duplicatesTopic returns the audit topic: KAFKA_DUPLICATES_TOPIC, else its deprecated name
// DEDUP_DUPLICATES_TOPIC of d.
func (k KafkaConfig) duplicatesTopic(d DedupConfig) string {
	if k.DuplicatesTopic != "" {
		return k.DuplicatesTopic
	}
	return d.DeprecatedDuplicatesTopic
}

// Deprecations returns a warning for each deprecated variable c was loaded with, saying what
// replaces it.
func (c Config) Deprecations() []string {
	var out []string
	if c.Dedup.DeprecatedDuplicatesTopic != "" {
		out = append(out, "DEDUP_DUPLICATES_TOPIC is deprecated: it is read as KAFKA_DUPLICATES_TOPIC, the audit topic of every dropped record "+
			"(duplicates and records dropped by a policy); rename it")
	}
	return out
}

// consumerFields converts the configuration into the worker's, except for TLS and SASL (see
// consumerConfig). Its field names are those of Config's leaves, so that fieldVars names the
// variable of every field consumer.Config.Validate may report.
func (c Config) consumerFields() consumer.Config {
	k, d := c.Kafka, c.Dedup
	brokers := make([]string, len(k.Brokers))
	for i, b := range k.Brokers {
		brokers[i] = strings.TrimSpace(b)
	}
	return consumer.Config{
		Brokers:            brokers,
		ClientID:           k.ClientID,
		InputTopic:         k.InputTopic,
		OutputTopic:        k.OutputTopic,
		DuplicatesTopic:    c.Kafka.duplicatesTopic(d),
		DuplicatesContent:  consumer.AuditContent(k.DuplicatesContent),
		DeadLetterTopic:    k.DeadLetterTopic,
		GroupID:            k.GroupID,
		GroupInstanceID:    k.GroupInstanceID,
		GroupProtocol:      consumer.GroupProtocol(k.GroupProtocol),
		StartFromLatest:    k.StartOffset == "latest",
		Isolation:          k.Isolation,
		SessionTimeout:     k.SessionTimeout,
		HeartbeatInterval:  k.HeartbeatInterval,
		RebalanceTimeout:   k.RebalanceTimeout,
		BatchSize:          k.BatchSize,
		BatchBytes:         k.BatchBytes,
		BatchTimeout:       k.BatchTimeout,
		CommitInterval:     k.CommitInterval,
		FetchMaxWait:       k.FetchMaxWait,
		FetchFailingMax:    k.FetchFailingMax,
		FetchMaxBytes:      k.FetchMaxBytes,
		ProgressInterval:   k.ProgressInterval,
		InputMemoryLimit:   int64(d.InputMemory()),
		DecodeMaxBytes:     k.decodeMaxBytes(),
		Partitioning:       consumer.Partitioning(k.Partitioning),
		Mode:               consumer.Mode(d.Mode),
		MarkHeader:         d.MarkHeader,
		ProcessedHeader:    d.ProcessedHeader,
		Unkeyed:            consumer.UnkeyedPolicy(d.Unkeyed),
		Compression:        k.Compression,
		ShutdownTimeout:    c.ShutdownTimeout,
		ProduceTimeout:     k.ProduceTimeout,
		RetryBackoffMax:    k.RetryBackoffMax,
		IdentityHold:       d.IdentityHold,
		DisableIdempotence: !k.Idempotent,
		Delivery:           consumer.Delivery(k.Delivery),
		TxnMaxRecords:      k.TxnMaxRecords,
		TxnInterval:        k.TxnInterval,
		TxnTimeout:         k.TxnTimeout,
	}
}

// consumerConfig converts the validated configuration into the worker's, loading the TLS files.
func (c Config) consumerConfig() (consumer.Config, error) {
	tc, name, err := c.Kafka.TLSConfig()
	if err != nil {
		return consumer.Config{}, fmt.Errorf("%s: %w", name, err)
	}
	mech, err := c.Kafka.SASL(c.AWS)
	if err != nil {
		return consumer.Config{}, fmt.Errorf("KAFKA_SASL_MECHANISM: %w", err)
	}
	cc := c.consumerFields()
	cc.TLS, cc.SASL = tc, mech
	return cc, nil
}
