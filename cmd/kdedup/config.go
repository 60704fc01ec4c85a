package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/kdedup/kdedup/consumer"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
)

// Config is everything kdedup reads from the environment. The struct tags are the single source
// of truth for variable names (env, envPrefix), defaults (envDefault) and documentation (desc):
// the README's configuration table is generated from them (go run ./cmd/kdedup envdoc).
// Leaf field names are unique across the sections, so parse errors can name their variable.
type Config struct {
	Kafka      KafkaConfig      `envPrefix:"KAFKA_"`
	Dedup      DedupConfig      `envPrefix:"DEDUP_"`
	Checkpoint CheckpointConfig `envPrefix:"CHECKPOINT_"`

	HTTPAddr        string        `env:"HTTP_ADDR" envDefault:":8080" desc:"Listen address of the HTTP server: /healthz, /readyz and /metrics."`
	LogLevel        string        `env:"LOG_LEVEL" envDefault:"info" desc:"Minimum log level: debug, info, warn or error. Logs are JSON lines on stderr; nothing is logged per record at info."`
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"30s" desc:"On SIGTERM/SIGINT: time allowed to stop fetching, produce what is in flight, commit, save state and leave the group before exiting."`
}

// KafkaConfig is the KAFKA_* section.
type KafkaConfig struct {
	Brokers           []string      `env:"BROKERS,required,notEmpty" envSeparator:"," desc:"Comma-separated bootstrap brokers, host:port."`
	InputTopic        string        `env:"INPUT_TOPIC,required,notEmpty" desc:"Topic to deduplicate."`
	OutputTopic       string        `env:"OUTPUT_TOPIC,required,notEmpty" desc:"Topic the deduplicated stream is produced to. It must exist; kdedup never creates topics."`
	GroupID           string        `env:"GROUP_ID" envDefault:"kdedup" desc:"Consumer group. Replicas with the same group split the input partitions."`
	ClientID          string        `env:"CLIENT_ID" envDefault:"kdedup" desc:"Client ID sent to the brokers."`
	StartOffset       string        `env:"START_OFFSET" envDefault:"earliest" desc:"Where a partition without a committed offset starts: earliest or latest."`
	SessionTimeout    time.Duration `env:"SESSION_TIMEOUT" envDefault:"10s" desc:"Consumer group session timeout: a replica that stops heartbeating for this long loses its partitions."`
	HeartbeatInterval time.Duration `env:"HEARTBEAT_INTERVAL" envDefault:"3s" desc:"Consumer group heartbeat interval; must be shorter than KAFKA_SESSION_TIMEOUT."`
	RebalanceTimeout  time.Duration `env:"REBALANCE_TIMEOUT" envDefault:"30s" desc:"How long the group waits for members to rejoin on a rebalance; also bounds how long a revoked partition may take to drain, commit and save its state."`
	BatchSize         int           `env:"BATCH_SIZE" envDefault:"1000" desc:"Maximum records per partition processed and produced together (one produce request per output partition)."`
	BatchBytes        int           `env:"BATCH_BYTES" envDefault:"983040" desc:"Maximum bytes of one produce request; keep it below the brokers' message.max.bytes."`
	BatchTimeout      time.Duration `env:"BATCH_TIMEOUT" envDefault:"5ms" desc:"How long a partition waits to fill a batch once it has a record: the latency added for throughput."`
	CommitInterval    time.Duration `env:"COMMIT_INTERVAL" envDefault:"1s" desc:"How often acknowledged input offsets are committed (0: after every batch). A crash re-delivers at most this much; a graceful stop commits everything."`
	FetchMaxWait      time.Duration `env:"FETCH_MAX_WAIT" envDefault:"500ms" desc:"How long a fetch waits on the broker for new records when a partition is idle."`
	FetchMaxBytes     int           `env:"FETCH_MAX_BYTES" envDefault:"16777216" desc:"Maximum bytes of one fetch response per partition."`
	Partitioning      string        `env:"PARTITIONING" envDefault:"same" desc:"Output partition of a record: same (the input partition's number; input and output partition counts must match) or hash (murmur2 of the key like Java's default partitioner; null keys go to input partition modulo the count)."`
	Compression       string        `env:"COMPRESSION" envDefault:"none" desc:"Compression of produced batches: none, gzip, snappy, lz4 or zstd."`
	TLSEnabled        bool          `env:"TLS_ENABLED" envDefault:"false" desc:"Connect to the brokers with TLS."`
	TLSCAFile         string        `env:"TLS_CA_FILE" desc:"PEM file of the CA certificates that verify the brokers (default: the system pool). Needs KAFKA_TLS_ENABLED=true."`
	TLSCertFile       string        `env:"TLS_CERT_FILE" desc:"PEM client certificate for mutual TLS, with KAFKA_TLS_KEY_FILE. Needs KAFKA_TLS_ENABLED=true."`
	TLSKeyFile        string        `env:"TLS_KEY_FILE" desc:"PEM private key of KAFKA_TLS_CERT_FILE."`
	SASLMechanism     string        `env:"SASL_MECHANISM" desc:"SASL mechanism: empty (none) or plain. SCRAM is not built in."`
	SASLUsername      string        `env:"SASL_USERNAME" desc:"SASL user name."`
	SASLPassword      string        `env:"SASL_PASSWORD" desc:"SASL password (never logged)."`
}

// DedupConfig is the DEDUP_* section.
type DedupConfig struct {
	Key               string        `env:"KEY" envDefault:"key" desc:"Identity of a record: key (the Kafka key), value (the whole value), header:NAME (the first header NAME) or json:PATH (a dotted path into a JSON object value, such as json:meta.id)."`
	Scope             string        `env:"SCOPE" envDefault:"partition" desc:"partition: one filter per input partition, which moves with the partition between replicas; duplicates are caught within a partition. global: one filter for all partitions, catching duplicates across partitions; only for a single replica."`
	Mode              string        `env:"MODE" envDefault:"drop" desc:"drop: duplicates are not produced. mark: every record is produced and duplicates carry the DEDUP_MARK_HEADER header with value 1."`
	MarkHeader        string        `env:"MARK_HEADER" envDefault:"kdedup-duplicate" desc:"Header added (value \"1\") to duplicates in mark mode, after the record's own headers."`
	DuplicatesTopic   string        `env:"DUPLICATES_TOPIC" desc:"Optional topic that also receives every duplicate, unchanged (partition: input partition modulo its partition count)."`
	UnkeyedPolicy     string        `env:"UNKEYED_POLICY" envDefault:"pass" desc:"Records whose identity cannot be extracted (no key, header missing, value not JSON or path missing): pass (produce without deduplicating) or drop. Counted in kdedup_records_unkeyed_total either way."`
	WindowCount       int           `env:"WINDOW_COUNT" envDefault:"8" desc:"Number of rotating generations of the sliding window. An identity is remembered for at least (count-1) x interval and at most count x interval: 1h45m-2h with the defaults."`
	WindowInterval    time.Duration `env:"WINDOW_INTERVAL" envDefault:"15m" desc:"Length of one generation. Generations rotate on the wall clock of the worker (processing time), not on record timestamps."`
	WindowCapacity    uint64        `env:"WINDOW_CAPACITY" envDefault:"1000000" desc:"Expected distinct identities per interval; per partition with DEDUP_SCOPE=partition. Above it the false-positive rate rises."`
	FalsePositiveRate float64       `env:"FALSE_POSITIVE_RATE" envDefault:"1e-6" desc:"Target probability over the whole window that a new identity is wrongly taken for a duplicate (and dropped)."`
	MaxMemory         ByteSize      `env:"MAX_MEMORY" envDefault:"0" desc:"Memory cap of one filter (one per assigned partition with DEDUP_SCOPE=partition) in bytes; suffixes KiB, MiB, GiB, KB, MB, GB accepted; 0 means 8GiB. Startup fails if the window needs more. The defaults need about 39MB per filter."`
	HashSeed          uint64        `env:"HASH_SEED" envDefault:"0" desc:"Seed of the identity hash. Set a secret value if producers could craft colliding identities. Kept in checkpoints."`
}

// CheckpointConfig is the CHECKPOINT_* section.
type CheckpointConfig struct {
	Dir      string        `env:"DIR" desc:"Directory for filter snapshots, so a restarted or rebalanced worker keeps its window. Empty disables checkpoints (state starts empty)."`
	Interval time.Duration `env:"INTERVAL" envDefault:"1m" desc:"How often filters are snapshotted into CHECKPOINT_DIR, besides on partition revoke and shutdown."`
	Keep     int           `env:"KEEP" envDefault:"3" desc:"Snapshots kept per unit (partition, or global); older ones are pruned. A corrupt newest snapshot falls back to the previous one."`
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

// ConfigError lists every configuration problem, one per line, each naming its variable.
type ConfigError struct {
	Problems []string
}

func (e *ConfigError) Error() string {
	return "invalid configuration:\n  " + strings.Join(e.Problems, "\n  ")
}

// loadConfig parses environ (as from env.ToMap(os.Environ())) into a Config and validates it. It
// returns a *ConfigError with all problems at once.
func loadConfig(environ map[string]string) (Config, error) {
	var cfg Config
	var problems []string
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
		return name, fmt.Sprintf("cannot parse %q: %v", environ[name], inner)
	}
	return "environment", err.Error()
}

// fieldVars maps every leaf field name of Config to its environment variable.
func fieldVars() map[string]string {
	out := map[string]string{}
	for _, v := range envVars() {
		out[v.Field] = v.Name
	}
	return out
}

// EnvVar describes one environment variable of Config.
type EnvVar struct {
	Name, Field, Default, Desc string
	Required, HasDefault       bool
}

// envVars lists Config's environment variables in declaration order, from the struct tags.
func envVars() []EnvVar {
	var out []EnvVar
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) && f.Tag.Get("env") == "" {
				walk(f.Type, prefix+f.Tag.Get("envPrefix"))
				continue
			}
			tag := f.Tag.Get("env")
			if tag == "" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			def, hasDef := f.Tag.Lookup("envDefault")
			out = append(out, EnvVar{
				Name: prefix + name, Field: f.Name, Default: def, HasDefault: hasDef,
				Desc: f.Tag.Get("desc"), Required: strings.Contains(","+opts+",", ",required,"),
			})
		}
	}
	walk(reflect.TypeOf(Config{}), "")
	return out
}

type problem struct{ name, msg string }

// validate checks what parsing cannot: ranges, enumerations, files, cross-field rules.
func (c Config) validate() []problem {
	var ps []problem
	add := func(name, format string, args ...any) { ps = append(ps, problem{name, fmt.Sprintf(format, args...)}) }
	oneOf := func(name, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		add(name, "%q is not one of %s", v, strings.Join(allowed, ", "))
	}
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			add(name, "must be positive, got %v", d)
		}
	}
	k := c.Kafka
	for _, b := range k.Brokers {
		if _, port, err := net.SplitHostPort(strings.TrimSpace(b)); err != nil || port == "" {
			add("KAFKA_BROKERS", "%q is not host:port", b)
		}
	}
	if k.InputTopic != "" && k.OutputTopic == k.InputTopic {
		add("KAFKA_OUTPUT_TOPIC", "must differ from KAFKA_INPUT_TOPIC (%q): kdedup would consume its own output", k.InputTopic)
	}
	oneOf("KAFKA_START_OFFSET", k.StartOffset, "earliest", "latest")
	positive("KAFKA_SESSION_TIMEOUT", k.SessionTimeout)
	positive("KAFKA_HEARTBEAT_INTERVAL", k.HeartbeatInterval)
	positive("KAFKA_REBALANCE_TIMEOUT", k.RebalanceTimeout)
	if k.HeartbeatInterval > 0 && k.SessionTimeout > 0 && k.HeartbeatInterval >= k.SessionTimeout {
		add("KAFKA_HEARTBEAT_INTERVAL", "%v must be shorter than KAFKA_SESSION_TIMEOUT (%v)", k.HeartbeatInterval, k.SessionTimeout)
	}
	if k.BatchSize < 1 || k.BatchSize > 1_000_000 {
		add("KAFKA_BATCH_SIZE", "must be between 1 and 1000000, got %d", k.BatchSize)
	}
	if k.BatchBytes < 1024 {
		add("KAFKA_BATCH_BYTES", "must be at least 1024, got %d", k.BatchBytes)
	}
	positive("KAFKA_BATCH_TIMEOUT", k.BatchTimeout)
	if k.CommitInterval < 0 {
		add("KAFKA_COMMIT_INTERVAL", "must not be negative")
	}
	positive("KAFKA_FETCH_MAX_WAIT", k.FetchMaxWait)
	if k.FetchMaxBytes < 1024 {
		add("KAFKA_FETCH_MAX_BYTES", "must be at least 1024, got %d", k.FetchMaxBytes)
	}
	oneOf("KAFKA_PARTITIONING", k.Partitioning, "same", "hash")
	if _, ok := compressions[k.Compression]; !ok {
		add("KAFKA_COMPRESSION", "%q is not one of none, gzip, snappy, lz4, zstd", k.Compression)
	}
	if !k.TLSEnabled {
		for name, v := range map[string]string{"KAFKA_TLS_CA_FILE": k.TLSCAFile, "KAFKA_TLS_CERT_FILE": k.TLSCertFile, "KAFKA_TLS_KEY_FILE": k.TLSKeyFile} {
			if v != "" {
				add(name, "is set but KAFKA_TLS_ENABLED is false")
			}
		}
	} else if _, name, err := k.tlsConfig(); err != nil {
		add(name, "%v", err)
	}
	switch strings.ToLower(k.SASLMechanism) {
	case "":
		if k.SASLUsername != "" || k.SASLPassword != "" {
			add("KAFKA_SASL_MECHANISM", "must be set (plain) when KAFKA_SASL_USERNAME or KAFKA_SASL_PASSWORD is")
		}
	case "plain":
		if k.SASLUsername == "" {
			add("KAFKA_SASL_USERNAME", "required with KAFKA_SASL_MECHANISM=plain")
		}
		if k.SASLPassword == "" {
			add("KAFKA_SASL_PASSWORD", "required with KAFKA_SASL_MECHANISM=plain")
		}
	default:
		add("KAFKA_SASL_MECHANISM", "%q is not supported (empty or plain)", k.SASLMechanism)
	}

	d := c.Dedup
	oneOf("DEDUP_SCOPE", d.Scope, "partition", "global")
	oneOf("DEDUP_MODE", d.Mode, "drop", "mark")
	oneOf("DEDUP_UNKEYED_POLICY", d.UnkeyedPolicy, "pass", "drop")
	if strings.TrimSpace(d.MarkHeader) == "" {
		add("DEDUP_MARK_HEADER", "must not be empty")
	}
	if d.DuplicatesTopic != "" && (d.DuplicatesTopic == k.InputTopic || d.DuplicatesTopic == k.OutputTopic) {
		add("DEDUP_DUPLICATES_TOPIC", "must differ from KAFKA_INPUT_TOPIC and KAFKA_OUTPUT_TOPIC")
	}
	if d.WindowCount < 1 {
		add("DEDUP_WINDOW_COUNT", "must be at least 1, got %d", d.WindowCount)
	}
	positive("DEDUP_WINDOW_INTERVAL", d.WindowInterval)
	if d.WindowCapacity < 1 {
		add("DEDUP_WINDOW_CAPACITY", "must be at least 1")
	}
	if !(d.FalsePositiveRate > 0 && d.FalsePositiveRate < 1) {
		add("DEDUP_FALSE_POSITIVE_RATE", "must be between 0 and 1 (exclusive), got %v", d.FalsePositiveRate)
	}
	ps = append(ps, validateDedup(d)...) // key spec and window sizing, by the packages that own them

	if c.Checkpoint.Dir != "" {
		positive("CHECKPOINT_INTERVAL", c.Checkpoint.Interval)
		if c.Checkpoint.Keep < 1 {
			ps = append(ps, problem{"CHECKPOINT_KEEP", fmt.Sprintf("must be >= 1, got %d", c.Checkpoint.Keep)})
		}
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		add("HTTP_ADDR", "%q is not a listen address like :8080", c.HTTPAddr)
	}
	if _, err := c.logLevel(); err != nil {
		add("LOG_LEVEL", "%q is not one of debug, info, warn, error", c.LogLevel)
	}
	positive("SHUTDOWN_TIMEOUT", c.ShutdownTimeout)
	return ps
}

var compressions = map[string]kafka.Compression{
	"none": 0, "gzip": kafka.Gzip, "snappy": kafka.Snappy, "lz4": kafka.Lz4, "zstd": kafka.Zstd,
}

func (c Config) logLevel() (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(c.LogLevel))
	return l, err
}

// tlsConfig returns the TLS configuration, or nil when TLS is disabled. On failure it also
// returns the variable at fault.
func (k KafkaConfig) tlsConfig() (*tls.Config, string, error) {
	if !k.TLSEnabled {
		return nil, "", nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if k.TLSCAFile != "" {
		pem, err := os.ReadFile(k.TLSCAFile)
		if err != nil {
			return nil, "KAFKA_TLS_CA_FILE", err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, "KAFKA_TLS_CA_FILE", fmt.Errorf("%s holds no PEM certificate", k.TLSCAFile)
		}
		tc.RootCAs = pool
	}
	if (k.TLSCertFile == "") != (k.TLSKeyFile == "") {
		return nil, "KAFKA_TLS_CERT_FILE", errors.New("KAFKA_TLS_CERT_FILE and KAFKA_TLS_KEY_FILE must be set together")
	}
	if k.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(k.TLSCertFile, k.TLSKeyFile)
		if err != nil {
			return nil, "KAFKA_TLS_CERT_FILE", err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, "", nil
}

func (k KafkaConfig) saslMechanism() sasl.Mechanism {
	if strings.ToLower(k.SASLMechanism) == "plain" {
		return plain.Mechanism{Username: k.SASLUsername, Password: k.SASLPassword}
	}
	return nil
}

// consumerConfig converts the validated configuration into the worker's.
func (c Config) consumerConfig() (consumer.Config, error) {
	k, d := c.Kafka, c.Dedup
	tc, name, err := k.tlsConfig()
	if err != nil {
		return consumer.Config{}, fmt.Errorf("%s: %w", name, err)
	}
	brokers := make([]string, len(k.Brokers))
	for i, b := range k.Brokers {
		brokers[i] = strings.TrimSpace(b)
	}
	return consumer.Config{
		Brokers:           brokers,
		InputTopic:        k.InputTopic,
		OutputTopic:       k.OutputTopic,
		DuplicatesTopic:   d.DuplicatesTopic,
		GroupID:           k.GroupID,
		ClientID:          k.ClientID,
		StartFromLatest:   k.StartOffset == "latest",
		SessionTimeout:    k.SessionTimeout,
		HeartbeatInterval: k.HeartbeatInterval,
		RebalanceTimeout:  k.RebalanceTimeout,
		BatchSize:         k.BatchSize,
		BatchBytes:        k.BatchBytes,
		BatchTimeout:      k.BatchTimeout,
		CommitInterval:    k.CommitInterval,
		FetchMaxWait:      k.FetchMaxWait,
		FetchMaxBytes:     k.FetchMaxBytes,
		Partitioning:      consumer.Partitioning(k.Partitioning),
		Mode:              consumer.Mode(d.Mode),
		MarkHeader:        d.MarkHeader,
		Unkeyed:           consumer.UnkeyedPolicy(d.UnkeyedPolicy),
		Compression:       compressions[k.Compression],
		TLS:               tc,
		SASL:              k.saslMechanism(),
		ShutdownTimeout:   c.ShutdownTimeout,
	}, nil
}
