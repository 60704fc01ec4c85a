package app

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/dedup"
	"github.com/kdedup/kdedup/identity"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/metrics"
)

func minimalEnv() map[string]string {
	return map[string]string{
		"KAFKA_BROKERS":      "k1:9092, k2:9092",
		"KAFKA_INPUT_TOPIC":  "events",
		"KAFKA_OUTPUT_TOPIC": "events-dedup",
	}
}

func withEnv(extra map[string]string) map[string]string {
	m := minimalEnv()
	for k, v := range extra {
		if v == "<unset>" {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	return m
}

// TestConfigDefaults proves the documented defaults and their conversion to the worker's config.
func TestConfigDefaults(t *testing.T) {
	cfg, err := Load(minimalEnv())
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cfg.consumerConfig()
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"brokers", cc.Brokers, []string{"k1:9092", "k2:9092"}},
		{"group", cc.GroupID, "kdedup"},
		{"start", cc.StartFromLatest, false},
		{"session", cc.SessionTimeout, 10 * time.Second},
		{"heartbeat", cc.HeartbeatInterval, 3 * time.Second},
		{"batch timeout", cc.BatchTimeout, 5 * time.Millisecond},
		{"batch size", cc.BatchSize, 1000},
		{"partitioning", cc.Partitioning, consumer.PartitionSame},
		{"mode", cc.Mode, consumer.ModeDrop},
		{"mark header", cc.MarkHeader, "kdedup-duplicate"},
		{"unkeyed", cc.Unkeyed, consumer.UnkeyedPass},
		{"shutdown", cc.ShutdownTimeout, 30 * time.Second},
		{"idempotent", cc.DisableIdempotence, false},
		{"tls", cc.TLS == nil, true},
		{"sasl", cc.SASL == nil, true},
		{"key", cfg.Dedup.Key, "key"},
		{"scope", cfg.Dedup.Scope, "partition"},
		{"window", windowConfig(cfg.Dedup, nil).Generations, 8},
		{"interval", windowConfig(cfg.Dedup, nil).Interval, 15 * time.Minute},
		{"capacity", windowConfig(cfg.Dedup, nil).Capacity, uint64(0)},
		{"auto", windowConfig(cfg.Dedup, nil).Auto, true},
		{"fpr", windowConfig(cfg.Dedup, nil).FalsePositiveRate, 1e-6},
		{"http", cfg.HTTPAddr, ":8080"},
	}
	for _, c := range checks {
		if !equal(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if err := cc.Validate(); err != nil {
		t.Errorf("converted config does not validate: %v", err)
	}
}

func equal(a, b any) bool {
	as, ok1 := a.([]string)
	bs, ok2 := b.([]string)
	if ok1 && ok2 {
		return slices.Equal(as, bs)
	}
	return a == b
}

// TestConfigErrorsAllAtOnce proves that every problem is reported in one error, each line naming
// its variable, for parse errors, missing variables and validation rules alike.
func TestConfigErrorsAllAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string // variables that must be named
	}{
		{"nothing set", map[string]string{}, []string{"KAFKA_BROKERS", "KAFKA_INPUT_TOPIC", "KAFKA_OUTPUT_TOPIC"}},
		{"parse errors", withEnv(map[string]string{
			"KAFKA_BATCH_SIZE": "many", "KAFKA_SESSION_TIMEOUT": "soon", "DEDUP_FALSE_POSITIVE_RATE": "low",
			"DEDUP_MEMORY_LIMIT": "lots", "KAFKA_TLS_ENABLED": "perhaps",
		}), []string{"KAFKA_BATCH_SIZE", "KAFKA_SESSION_TIMEOUT", "DEDUP_FALSE_POSITIVE_RATE", "DEDUP_MEMORY_LIMIT", "KAFKA_TLS_ENABLED"}},
		{"enumerations", withEnv(map[string]string{
			"KAFKA_START_OFFSET": "middle", "KAFKA_PARTITIONING": "random", "KAFKA_COMPRESSION": "rar",
			"DEDUP_SCOPE": "cluster", "DEDUP_MODE": "delete", "DEDUP_UNKEYED_POLICY": "keep", "LOG_LEVEL": "chatty",
			"DEDUP_OVERLOAD_POLICY": "block", "KAFKA_ISOLATION_LEVEL": "read_some",
		}), []string{"KAFKA_START_OFFSET", "KAFKA_PARTITIONING", "KAFKA_COMPRESSION", "DEDUP_SCOPE", "DEDUP_MODE", "DEDUP_UNKEYED_POLICY", "LOG_LEVEL", "DEDUP_OVERLOAD_POLICY", "KAFKA_ISOLATION_LEVEL"}},
		{"key spec", withEnv(map[string]string{"DEDUP_KEY": "json:"}), []string{"DEDUP_KEY"}},
		{"ranges and rules", withEnv(map[string]string{
			"KAFKA_OUTPUT_TOPIC": "events", "KAFKA_HEARTBEAT_INTERVAL": "20s", "KAFKA_BATCH_SIZE": "0",
			"KAFKA_BATCH_TIMEOUT": "0s", "DEDUP_WINDOW_COUNT": "0", "DEDUP_WINDOW_INTERVAL": "-1m",
			"DEDUP_FALSE_POSITIVE_RATE": "1.5", "DEDUP_MARK_HEADER": " ", "SHUTDOWN_TIMEOUT": "0s",
			"KAFKA_BROKERS": "nohostport", "HTTP_ADDR": "8080",
		}), []string{"KAFKA_OUTPUT_TOPIC", "KAFKA_HEARTBEAT_INTERVAL", "KAFKA_BATCH_SIZE", "KAFKA_BATCH_TIMEOUT",
			"DEDUP_WINDOW_COUNT", "DEDUP_WINDOW_INTERVAL", "DEDUP_FALSE_POSITIVE_RATE", "DEDUP_MARK_HEADER",
			"SHUTDOWN_TIMEOUT", "KAFKA_BROKERS", "HTTP_ADDR"}},
		{"zeros", withEnv(map[string]string{
			"KAFKA_SESSION_TIMEOUT": "0s", "KAFKA_HEARTBEAT_INTERVAL": "0s", "KAFKA_REBALANCE_TIMEOUT": "0s",
			"KAFKA_BATCH_SIZE": "0", "KAFKA_BATCH_BYTES": "0", "KAFKA_BATCH_TIMEOUT": "0s", "KAFKA_FETCH_MAX_WAIT": "0s",
			"KAFKA_FETCH_FAILING_MAX": "0s", "KAFKA_FETCH_MAX_BYTES": "0", "SHUTDOWN_TIMEOUT": "0s",
			"KAFKA_PROGRESS_INTERVAL": "0s", "KAFKA_PRODUCE_TIMEOUT": "0s", "KAFKA_RETRY_BACKOFF_MAX": "0s", "DEDUP_IDENTITY_HOLD": "0s",
		}), []string{"KAFKA_SESSION_TIMEOUT", "KAFKA_HEARTBEAT_INTERVAL", "KAFKA_REBALANCE_TIMEOUT", "KAFKA_BATCH_SIZE",
			"KAFKA_BATCH_BYTES", "KAFKA_BATCH_TIMEOUT", "KAFKA_FETCH_MAX_WAIT", "KAFKA_FETCH_FAILING_MAX", "KAFKA_FETCH_MAX_BYTES",
			"SHUTDOWN_TIMEOUT", "KAFKA_PROGRESS_INTERVAL", "KAFKA_PRODUCE_TIMEOUT", "KAFKA_RETRY_BACKOFF_MAX", "DEDUP_IDENTITY_HOLD"}},
		{"memory budget below one filter", withEnv(map[string]string{"DEDUP_MEMORY_LIMIT": "1MiB", "DEDUP_WINDOW_CAPACITY": "1000000"}), []string{"DEDUP_MEMORY_LIMIT"}},
		{"removed per-filter cap", withEnv(map[string]string{"DEDUP_MAX_MEMORY": "1GiB"}), []string{"DEDUP_MAX_MEMORY"}},
		{"capacity", withEnv(map[string]string{"DEDUP_WINDOW_CAPACITY": "0"}), []string{"DEDUP_WINDOW_CAPACITY"}},
		{"short signing key", withEnv(map[string]string{"CHECKPOINT_SIGNING_KEY": "secret-of-31-bytes-is-too-shor"}), []string{"CHECKPOINT_SIGNING_KEY"}},
		{"tls without tls", withEnv(map[string]string{"KAFKA_TLS_CA_FILE": "/ca.pem"}), []string{"KAFKA_TLS_CA_FILE"}},
		{"tls missing file", withEnv(map[string]string{"KAFKA_TLS_ENABLED": "true", "KAFKA_TLS_CA_FILE": "/does/not/exist.pem"}), []string{"KAFKA_TLS_CA_FILE"}},
		{"sasl", withEnv(map[string]string{"KAFKA_SASL_MECHANISM": "plain"}), []string{"KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD"}},
		{"unknown mechanism", withEnv(map[string]string{"KAFKA_SASL_MECHANISM": "scram-sha-1", "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": "secret"}),
			[]string{"KAFKA_SASL_MECHANISM"}},
		{"scram without password", withEnv(map[string]string{"KAFKA_SASL_MECHANISM": "scram-sha-256", "KAFKA_SASL_USERNAME": "u"}),
			[]string{"KAFKA_SASL_PASSWORD"}},
		{"server name without tls", withEnv(map[string]string{"KAFKA_TLS_SERVER_NAME": "broker"}), []string{"KAFKA_TLS_SERVER_NAME"}},
		{"dups topic", withEnv(map[string]string{"KAFKA_DUPLICATES_TOPIC": "events-dedup"}), []string{"KAFKA_DUPLICATES_TOPIC"}},
		{"dups topic under both names", withEnv(map[string]string{"KAFKA_DUPLICATES_TOPIC": "audit", "DEDUP_DUPLICATES_TOPIC": "dups"}),
			[]string{"DEDUP_DUPLICATES_TOPIC"}},
		{"dups content", withEnv(map[string]string{"KAFKA_DUPLICATES_TOPIC": "audit", "KAFKA_DUPLICATES_CONTENT": "keys"}),
			[]string{"KAFKA_DUPLICATES_CONTENT"}},
		{"dead-letter topic", withEnv(map[string]string{"KAFKA_DEAD_LETTER_TOPIC": "events-dedup"}), []string{"KAFKA_DEAD_LETTER_TOPIC"}},
		{"checkpoint url with credentials", withEnv(map[string]string{"CHECKPOINT_URL": "s3://AKID:secret@bucket/p", "CHECKPOINT_KEEP": "0"}),
			[]string{"CHECKPOINT_URL", "CHECKPOINT_KEEP"}},
		{"checkpoint url and dir disagree", withEnv(map[string]string{"CHECKPOINT_URL": "s3://bucket/p", "CHECKPOINT_DIR": "/var/lib/kdedup"}),
			[]string{"CHECKPOINT_URL"}},
		{"s3 variables", withEnv(map[string]string{"CHECKPOINT_URL": "s3://bucket/p", "AWS_ENDPOINT_URL_S3": "minio:9000",
			"AWS_ENDPOINT_URL": "http://u:secret@x", "AWS_ACCESS_KEY_ID": "AKID"}),
			[]string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_SECRET_ACCESS_KEY"}},
		{"s3 secret without key", withEnv(map[string]string{"CHECKPOINT_URL": "s3://bucket/p", "AWS_SECRET_ACCESS_KEY": "secret"}),
			[]string{"AWS_ACCESS_KEY_ID"}},
		{"rebuild bound", withEnv(map[string]string{"CHECKPOINT_REBUILD_MAX_RECORDS": "-1"}), []string{"CHECKPOINT_REBUILD_MAX_RECORDS"}},
		{"source metrics", withEnv(map[string]string{"DEDUP_METRICS_SOURCE": "key-prefix:", "DEDUP_METRICS_SOURCE_LIMIT": "0",
			"DEDUP_WINDOW_REFRESH": "sometimes"}),
			[]string{"DEDUP_METRICS_SOURCE", "DEDUP_METRICS_SOURCE_LIMIT", "DEDUP_WINDOW_REFRESH"}},
		{"source hold too short", withEnv(map[string]string{"DEDUP_METRICS_SOURCE_HOLD": "10ms"}), []string{"DEDUP_METRICS_SOURCE_HOLD"}},
		{"source hold too long", withEnv(map[string]string{"DEDUP_METRICS_SOURCE_HOLD": "1h"}), []string{"DEDUP_METRICS_SOURCE_HOLD"}},
		{"rebalance within a heartbeat", withEnv(map[string]string{"KAFKA_REBALANCE_TIMEOUT": "2s"}), []string{"KAFKA_REBALANCE_TIMEOUT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.env)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("loadConfig = %v, want a *ConfigError", err)
			}
			for _, v := range tc.want {
				found := false
				for _, p := range ce.Problems {
					if strings.HasPrefix(p, v+": ") || strings.Contains(strings.SplitN(p, ":", 2)[0], v) {
						found = true
					}
				}
				if !found {
					t.Errorf("no problem names %s; problems:\n%s", v, strings.Join(ce.Problems, "\n"))
				}
			}
			if len(ce.Problems) < len(tc.want) {
				t.Errorf("%d problems for %d bad variables", len(ce.Problems), len(tc.want))
			}
			for _, p := range ce.Problems {
				if strings.Contains(p, "secret") {
					t.Errorf("problem leaks a value: %s", p)
				}
			}
		})
	}
}

// TestRebuildSetting checks when CHECKPOINT_REBUILD_MAX_RECORDS reaches dedup: not under hash
// partitioning with the partition scope, where output partitions mix every input partition.
func TestRebuildSetting(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want int64
	}{
		{map[string]string{}, 10_000_000},
		{map[string]string{"CHECKPOINT_REBUILD_MAX_RECORDS": "0"}, 0},
		{map[string]string{"CHECKPOINT_REBUILD_MAX_RECORDS": "5000"}, 5000},
		{map[string]string{"KAFKA_PARTITIONING": "hash"}, 0},
		{map[string]string{"KAFKA_PARTITIONING": "hash", "DEDUP_SCOPE": "global"}, 10_000_000},
	} {
		cfg, err := Load(withEnv(tc.env))
		if err != nil {
			t.Fatal(err)
		}
		if got := rebuildMaxRecords(cfg, slog.New(slog.DiscardHandler)); got != tc.want {
			t.Errorf("%v: rebuild bound %d, want %d", tc.env, got, tc.want)
		}
	}
}

// TestParseErrorsNameVariables relies on leaf field names being unique across sections: it
// proves that they are, so every parse error maps to exactly one variable.
func TestParseErrorsNameVariables(t *testing.T) {
	seen := map[string]string{}
	for _, v := range EnvVars() {
		if other, dup := seen[v.Field]; dup {
			t.Errorf("field name %s is used by %s and %s", v.Field, other, v.Name)
		}
		seen[v.Field] = v.Name
		if v.Desc == "" {
			t.Errorf("%s has no desc tag", v.Name)
		}
	}
}

func TestByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"1048576", 1 << 20, true}, {"512MiB", 512 << 20, true}, {"2GiB", 2 << 30, true},
		{"3 KiB", 3 << 10, true}, {"500MB", 500e6, true}, {"7B", 7, true},
		{"", 0, false}, {"lots", 0, false}, {"-1", 0, false}, {"1.5GiB", 0, false}, {"99999999999TiB", 0, false},
	} {
		var b ByteSize
		err := b.UnmarshalText([]byte(tc.in))
		if (err == nil) != tc.ok || (tc.ok && uint64(b) != tc.want) {
			t.Errorf("ByteSize(%q) = %d, %v; want %d, ok=%v", tc.in, b, err, tc.want, tc.ok)
		}
	}
}

// TestConfigConversion proves non-default values reach the worker's config.
func TestConfigConversion(t *testing.T) {
	cfg, err := Load(withEnv(map[string]string{
		"KAFKA_START_OFFSET": "latest", "KAFKA_PARTITIONING": "hash", "KAFKA_COMPRESSION": "zstd",
		"DEDUP_MODE": "mark", "DEDUP_MARK_HEADER": "x-dup", "DEDUP_UNKEYED_POLICY": "drop",
		"KAFKA_DUPLICATES_TOPIC": "dups", "KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_SASL_USERNAME": "u",
		"KAFKA_SASL_PASSWORD": "secret", "DEDUP_MEMORY_LIMIT": "1GiB", "DEDUP_HASH_SEED": "42",
		"KAFKA_IDEMPOTENT": "false", "KAFKA_ISOLATION_LEVEL": "read_uncommitted", "KAFKA_DEAD_LETTER_TOPIC": "dlq",
	}))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cfg.consumerConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !cc.StartFromLatest || cc.Partitioning != consumer.PartitionHash || cc.Compression != "zstd" ||
		cc.Mode != consumer.ModeMark || cc.MarkHeader != "x-dup" || cc.Unkeyed != consumer.UnkeyedDrop ||
		cc.DuplicatesTopic != "dups" || cc.DeadLetterTopic != "dlq" || !strings.HasPrefix(fmt.Sprint(cc.SASL), "SASL PLAIN as ") || !cc.DisableIdempotence ||
		cc.Isolation != "read_uncommitted" {
		t.Errorf("conversion lost a setting: %+v", cc)
	}
	wc := windowConfig(cfg.Dedup, newBudget(cfg.Dedup))
	if wc.Budget.Limit() != 1<<30-maxInputMemory || wc.Seed != 42 {
		t.Errorf("window config %+v, want a budget of 1GiB less the input's 32MiB and Seed 42", wc)
	}
	if cc.InputMemoryLimit != maxInputMemory {
		t.Errorf("InputMemoryLimit = %d, want %d", cc.InputMemoryLimit, maxInputMemory)
	}
}

// TestTLSConfig proves that a CA file and a client key pair are loaded.
func TestTLSConfig(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kdedup-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cfg, err := Load(withEnv(map[string]string{
		"KAFKA_TLS_ENABLED": "true", "KAFKA_TLS_CA_FILE": certFile,
		"KAFKA_TLS_CERT_FILE": certFile, "KAFKA_TLS_KEY_FILE": keyFile,
	}))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cfg.consumerConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cc.TLS == nil || cc.TLS.RootCAs == nil || len(cc.TLS.Certificates) != 1 {
		t.Fatalf("TLS config %+v lacks the CA or the client certificate", cc.TLS)
	}
	_, err = Load(withEnv(map[string]string{"KAFKA_TLS_ENABLED": "true", "KAFKA_TLS_CERT_FILE": certFile}))
	if err == nil || !strings.Contains(err.Error(), "KAFKA_TLS_CERT_FILE") {
		t.Errorf("cert without key: %v, want an error naming KAFKA_TLS_CERT_FILE", err)
	}
}

// TestWorkerProblemsNameVariables proves that every problem consumer.Config.Validate can report
// about a field that loadConfig fills is reported against that field's environment variable.
func TestWorkerProblemsNameVariables(t *testing.T) {
	cfg, err := Load(withEnv(map[string]string{"KAFKA_DUPLICATES_TOPIC": "dups"}))
	if err != nil {
		t.Fatal(err)
	}
	filled := reflect.ValueOf(cfg.consumerFields())
	bad := consumer.Config{
		Brokers: []string{"nohostport"}, OutputTopic: "in", InputTopic: "in", DuplicatesTopic: "in",
		SessionTimeout: -1, HeartbeatInterval: -1, RebalanceTimeout: -1, BatchSize: -1, BatchBytes: -1,
		BatchTimeout: -1, CommitInterval: -1, FetchMaxWait: -1, FetchMaxBytes: -1,
		Partitioning: "x", Mode: "x", MarkHeader: " ", Unkeyed: "x",
		ShutdownTimeout: -1, ProduceTimeout: -1, RetryBackoffMax: -1,
	}
	vars, named := fieldVars(), 0
	for _, fe := range consumer.FieldErrors(bad.Validate()) {
		if filled.FieldByName(fe.Field).IsZero() {
			continue // loadConfig never sets it: the worker's default applies
		}
		if vars[fe.Field] == "" {
			t.Errorf("problem with %s has no variable: %v", fe.Field, fe)
		}
		named++
	}
	if named < 17 {
		t.Errorf("%d problems named a variable, want one for each of the 17 fields loadConfig fills and Validate checks", named)
	}
	_, err = Load(withEnv(map[string]string{"KAFKA_BATCH_SIZE": "2000000", "DEDUP_MODE": "keep", "KAFKA_BATCH_TIMEOUT": "-1s"}))
	var ce *ConfigError
	want := []string{
		"KAFKA_BATCH_SIZE: must be between 1 and 1000000, got 2000000",
		"KAFKA_BATCH_TIMEOUT: must be positive, got -1s",
		`DEDUP_MODE: "keep" is not one of drop, mark`,
	}
	if !errors.As(err, &ce) || !slices.Equal(ce.Problems, want) {
		t.Errorf("loadConfig = %v, want the problems %q", err, want)
	}
}

// TestCheckpointLocation proves how CHECKPOINT_URL and CHECKPOINT_DIR combine, and that the AWS_*
// variables reach the S3 store's options (AWS_ENDPOINT_URL_S3 before AWS_ENDPOINT_URL).
func TestCheckpointLocation(t *testing.T) {
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		url, dir string
		want     string // the location's URL; "" means disabled
		problem  string // the variable at fault
	}{
		{"disabled", "", "", "", ""},
		{"dir", "", "/var/lib/kdedup", "file:///var/lib/kdedup", ""},
		{"relative dir", "", "snaps", "file://" + filepath.Join(cwd, "snaps"), ""},
		{"file url", "file:///var/lib/kdedup", "", "file:///var/lib/kdedup", ""},
		{"s3 url", "s3://bucket/kdedup/prod", "", "s3://bucket/kdedup/prod/", ""},
		{"both agree", "file:///var/lib/kdedup", "/var/lib/kdedup/", "file:///var/lib/kdedup", ""},
		{"both disagree", "file:///var/lib/a", "/var/lib/b", "", "CHECKPOINT_URL"},
		{"s3 and dir", "s3://bucket/p", "/var/lib/kdedup", "", "CHECKPOINT_URL"},
		{"bad url", "minio://bucket", "", "", "CHECKPOINT_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loc, ok, p := checkpointLocation(CheckpointConfig{URL: tc.url, Dir: tc.dir})
			switch {
			case tc.problem != "":
				if p == nil || p.name != tc.problem {
					t.Fatalf("problem %+v, want one naming %s", p, tc.problem)
				}
			case p != nil:
				t.Fatalf("unexpected problem %+v", p)
			case ok != (tc.want != "") || (ok && loc.String() != tc.want):
				t.Fatalf("location %s (ok=%v), want %q", loc, ok, tc.want)
			}
		})
	}
	cfg, err := Load(withEnv(map[string]string{
		"CHECKPOINT_URL": "s3://bucket/p", "AWS_REGION": "eu-central-1", "AWS_ENDPOINT_URL": "http://all:1",
		"AWS_ENDPOINT_URL_S3": "http://s3only:9000", "AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "sk",
		"AWS_SESSION_TOKEN": "tok",
	}))
	if err != nil {
		t.Fatal(err)
	}
	o := s3Options(cfg.AWS, nil)
	if o.Region != "eu-central-1" || o.Endpoint != "http://s3only:9000" || o.AccessKeyID != "AKID" ||
		o.SecretAccessKey != "sk" || o.SessionToken != "tok" {
		t.Errorf("s3Options = %+v", o)
	}
	if o := s3Options(AWSConfig{EndpointURL: "http://all:1"}, nil); o.Endpoint != "http://all:1" {
		t.Errorf("AWS_ENDPOINT_URL alone gives endpoint %q", o.Endpoint)
	}
}

// TestEnvDefaultsAreTheConstants proves that the envDefault tags, which must be literals, name
// the values the packages define: the names of enumeration values, and the defaults a package
// keeps for its zero value (for its other callers: internal/app always passes the variable).
func TestEnvDefaultsAreTheConstants(t *testing.T) {
	defaults := map[string]string{}
	for _, v := range EnvVars() {
		defaults[v.Name] = v.Default
	}
	for _, c := range []struct{ name, want string }{
		{"DEDUP_MARK_HEADER", consumer.DefaultMarkHeader},
		{"DEDUP_MODE", string(consumer.ModeDrop)},
		{"DEDUP_SCOPE", string(dedup.ScopePartition)},
		{"KAFKA_BATCH_BYTES", strconv.Itoa(kafkaio.DefaultBatchBytes)},
		{"KAFKA_CLIENT_ID", kafkaio.DefaultClientID},
		{"CHECKPOINT_KEEP", strconv.Itoa(checkpoint.DefaultKeep)},
		{"DEDUP_METRICS_SOURCE_LIMIT", strconv.Itoa(metrics.DefaultSourceLimit)},
	} {
		if got := defaults[c.name]; got != c.want {
			t.Errorf("%s has envDefault %q, want the constant %q", c.name, got, c.want)
		}
	}
	for _, c := range []struct {
		name string
		want time.Duration
	}{
		{"DEDUP_EVENT_TIME_MAX_AHEAD", dedup.DefaultMaxAhead},
		{"KAFKA_TXN_TIMEOUT", kafkaio.DefaultTransactionTimeout},
		{"SCHEMA_REGISTRY_TIMEOUT", identity.DefaultRegistryTimeout},
		{"DEDUP_METRICS_SOURCE_HOLD", metrics.DefaultSourceHold},
	} {
		if d, err := time.ParseDuration(defaults[c.name]); err != nil || d != c.want {
			t.Errorf("%s has envDefault %q, want the constant %v", c.name, defaults[c.name], c.want)
		}
	}
}

// TestDuplicatesTopicAlias proves that DEDUP_DUPLICATES_TOPIC, the deprecated name of
// KAFKA_DUPLICATES_TOPIC, still sets the audit topic, with a deprecation warning, and that the
// two names may be set together when they agree.
func TestDuplicatesTopicAlias(t *testing.T) {
	for _, tc := range []struct {
		name       string
		env        map[string]string
		topic      string
		deprecated bool
	}{
		{"new name", map[string]string{"KAFKA_DUPLICATES_TOPIC": "audit"}, "audit", false},
		{"old name", map[string]string{"DEDUP_DUPLICATES_TOPIC": "audit"}, "audit", true},
		{"both, agreeing", map[string]string{"KAFKA_DUPLICATES_TOPIC": "audit", "DEDUP_DUPLICATES_TOPIC": "audit"}, "audit", true},
		{"neither", map[string]string{}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(withEnv(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			cc := cfg.consumerFields()
			if cc.DuplicatesTopic != tc.topic || cc.DuplicatesContent != consumer.AuditFull {
				t.Errorf("audit topic %q content %q, want %q full", cc.DuplicatesTopic, cc.DuplicatesContent, tc.topic)
			}
			if got := len(cfg.Deprecations()) > 0; got != tc.deprecated {
				t.Errorf("deprecation warnings %q, want some: %v", cfg.Deprecations(), tc.deprecated)
			}
		})
	}
}
