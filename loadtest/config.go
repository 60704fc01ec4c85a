package loadtest

import (
	"github.com/kdedup/kdedup/identity"

	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// Kind classifies a generated record.
type Kind uint8

const (
	// KindOriginal is the first record of an event.
	KindOriginal Kind = iota
	// KindImmediate re-sends an event right after its original, on the same partition.
	KindImmediate
	// KindWithin re-sends an event within the guaranteed window, on the same partition.
	KindWithin
	// KindBeyond re-sends an event after the window has certainly forgotten it, on the same
	// partition: it must pass again.
	KindBeyond
	// KindCross re-sends an event within the window on another partition: it is dropped only
	// under scope global.
	KindCross
	// KindMarker is the unkeyed end-of-stream record written last to every input partition.
	KindMarker
	numKinds
)

var kindNames = [numKinds]string{"original", "immediate", "within", "beyond", "cross", "marker"}

// String returns the kind's name ("original", "immediate", "within", "beyond", "cross" or
// "marker").
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Mix weighs the kinds of duplicates. Weights are relative and must not be negative; at least one
// must be positive when Config.DupRatio > 0.
type Mix struct {
	Immediate, Within, Beyond, Cross float64
}

// DefaultMix is the mix used when Config.Mix is the zero value.
var DefaultMix = Mix{Immediate: 0.25, Within: 0.45, Beyond: 0.15, Cross: 0.15}

// ParseMix parses "immediate=1,within=2,beyond=1,cross=1"; kinds left out weigh 0. It returns a
// "loadtest: ..." error for an unknown kind or a weight that is not a non-negative number.
func ParseMix(s string) (Mix, error) {
	var m Mix
	if strings.TrimSpace(s) == "" {
		return m, errors.New("loadtest: empty duplicate mix (want e.g. immediate=1,within=2,beyond=1,cross=1)")
	}
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Mix{}, fmt.Errorf("loadtest: duplicate mix element %q is not kind=weight", part)
		}
		w, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || w < 0 || math.IsInf(w, 0) || math.IsNaN(w) {
			return Mix{}, fmt.Errorf("loadtest: duplicate mix weight %q of %s is not a non-negative number", val, name)
		}
		switch strings.TrimSpace(name) {
		case "immediate":
			m.Immediate = w
		case "within":
			m.Within = w
		case "beyond":
			m.Beyond = w
		case "cross":
			m.Cross = w
		default:
			return Mix{}, fmt.Errorf("loadtest: unknown duplicate kind %q (want immediate, within, beyond or cross)", name)
		}
	}
	return m, nil
}

// String returns the mix in the form ParseMix reads.
func (m Mix) String() string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return "immediate=" + f(m.Immediate) + ",within=" + f(m.Within) + ",beyond=" + f(m.Beyond) + ",cross=" + f(m.Cross)
}

func (m Mix) total() float64 { return m.Immediate + m.Within + m.Beyond + m.Cross }

// FieldKind says where the generator writes the event id: the identity kind of the worker's
// DEDUP_KEY.
type FieldKind = identity.Kind

// The kinds of field the generator writes.
const (
	// FieldKey writes the event id as the Kafka key (every event is its own key; Entities is not
	// used).
	FieldKey = identity.KindKey
	// FieldValue writes the event id, padded, as the whole value; the Kafka key is the entity.
	FieldValue = identity.KindValue
	// FieldHeader writes the event id in a header (not one of the lt- headers); the Kafka key is
	// the entity.
	FieldHeader = identity.KindHeader
	// FieldJSON writes the event id at a path of a JSON object value; the Kafka key is the entity.
	FieldJSON = identity.KindJSON
)

// Field is where the event id goes: the worker's DEDUP_KEY, parsed by the identity package.
type Field = identity.Spec

// ParseField parses the worker's DEDUP_KEY syntax (identity.Parse) for the kinds the generator
// writes: "key", "value", "header:NAME" (not one of the loadtest's lt- headers) or "json:PATH". It
// returns a "loadtest: ..." error otherwise.
func ParseField(s string) (Field, error) {
	f, err := identity.Parse(s)
	if err != nil {
		return Field{}, fmt.Errorf("loadtest: field %q: want key, value, header:NAME or json:PATH (%w)", s, err)
	}
	switch {
	case f.Kind == FieldHeader && strings.HasPrefix(f.Name, "lt-"):
		return Field{}, fmt.Errorf("loadtest: header %q is reserved for the loadtest's own headers", f.Name)
	case f.Kind > FieldJSON:
		return Field{}, fmt.Errorf("loadtest: field %q: want key, value, header:NAME or json:PATH (the generator writes no %s)", s, f.Kind)
	}
	return f, nil
}

// Config configures a Run. Fields documented "default X" take X when zero.
type Config struct {
	// Conn is the cluster: brokers (required), TLS and SASL. Its client ID defaults to
	// "kdedup-loadtest".
	kafkaio.Conn
	// InputTopic receives the generated records; it must exist. Required.
	InputTopic string
	// OutputTopic is read and verified; it must exist. Required.
	OutputTopic string

	// Count is the number of records to send, duplicates included (the end markers, one per
	// input partition, come on top). Required, at least 1.
	Count int
	// Rate is the number of records per second; 0 sends as fast as the brokers accept.
	Rate float64
	// Entities is the number of distinct Kafka keys of the records (with FieldKey every event is
	// its own key instead). Keys are placed on partitions by murmur2, like the Java client does.
	// Default DefaultEntities.
	Entities int
	// KeySize is the size of a Kafka key in bytes (padded; at least what the key needs).
	// Default DefaultKeySize.
	KeySize int
	// ValueSize is the size of a value in bytes (padded; at least what the value needs).
	// Default DefaultValueSize.
	ValueSize int

	// DupRatio is the fraction of the records that are duplicates, in [0, 0.95].
	DupRatio float64
	// Mix weighs the kinds of duplicates. Default DefaultMix. An event gets at most one beyond and
	// one cross duplicate; with a high DupRatio further draws of those become within duplicates.
	Mix Mix
	// WithinMax bounds the delay of within and cross duplicates. Default (N−1)·Interval/2.
	WithinMax time.Duration
	// BeyondMin and BeyondMax bound the delay of beyond duplicates. Default N·Interval plus a
	// quarter and three quarters of an Interval.
	BeyondMin, BeyondMax time.Duration

	// Late is the fraction of the records, in [0, 0.95 − DupRatio], that are late: unique events
	// without duplicates whose Kafka timestamp is LateAge before their creation (every other
	// record is stamped at its creation). A worker under DEDUP_WINDOW_CLOCK=event finds them
	// older than its window and counts them in kdedup_filter_late_records_total; the verifier
	// expects each once, as DEDUP_LATE_RECORDS=pass (the default) and processing time do.
	// Verdict.Late says how many were sent. The duplicates stay a share DupRatio of the records.
	Late float64

	// Sources, when positive, stamps every record with a source in header SourceHeader, for a
	// worker that counts by source (DEDUP_METRICS_SOURCE=header:lt-source): "src-000" to
	// "src-NNN" for Sources sources, skewed so that src-000 is the heaviest (source i takes about
	// ((i+1)/Sources)^2 - (i/Sources)^2 of the events); the copies of an event carry its source.
	// Verdict.BySource counts the records and the dropped ones per source. At most 1000.
	Sources int
	// Oversize is the number of oversized records: unique events without duplicates whose value
	// has OversizeBytes, the i-th on input partition i % partitions, after a share (i+1)/(Oversize+1)
	// of the records. The input topic must take them (max.message.bytes); an output topic that
	// does not makes the worker block the partition at them, or write them to its dead-letter
	// topic (DeadLetterTopic). See "Oversized records" in the package documentation.
	Oversize int
	// OversizeBytes is the value size of an oversized record. Default DefaultOversizeBytes.
	OversizeBytes int
	// DeadLetterTopic is the worker's KAFKA_DEAD_LETTER_TOPIC, if it has one: the verifier then
	// expects every oversized record that the output did not take there, and no blocked
	// partition.
	DeadLetterTopic string
	// AuditTopic is the worker's KAFKA_DUPLICATES_TOPIC, if it has one: the verifier then reads it
	// after the run and expects every record sent in exactly one of the output and the audit
	// topic, every lost unique event (a false positive) in the audit topic with its source
	// coordinates (Verdict.Audit).
	AuditTopic string

	// Field is where the event id is written; it must match the worker's DEDUP_KEY.
	Field Field
	// Global is true when the worker runs with DEDUP_SCOPE=global.
	Global bool
	// Refresh is true when the worker runs with DEDUP_WINDOW_REFRESH=true: the verifier then
	// judges a copy beyond the window from the event's last copy (Expect.Refresh).
	Refresh bool
	// WindowCount and WindowInterval must match the worker's DEDUP_WINDOW_COUNT and
	// DEDUP_WINDOW_INTERVAL. Required.
	WindowCount    int
	WindowInterval time.Duration
	// FalsePositiveRate is the worker's DEDUP_FALSE_POSITIVE_RATE, for the loss bound. Required
	// unless ExpectAll.
	FalsePositiveRate float64
	// MarkHeader, when set, is the worker's DEDUP_MARK_HEADER in DEDUP_MODE=mark: output records
	// that carry it with value "1" count as dropped.
	MarkHeader string
	// ExpectAll verifies a pipeline that does not deduplicate (a pass-through baseline): every
	// record must appear exactly once.
	ExpectAll bool

	// Seed seeds the plan. The same Seed gives the same plan.
	Seed uint64
	// RunID tags the records of this run (header lt-run) and salts the event ids. Default: derived
	// from the clock.
	RunID string

	// Settle is how long the verifier waits for more output, once everything was sent, when the
	// end markers do not all arrive (for example under DEDUP_UNKEYED_POLICY=drop). Default DefaultSettle.
	Settle time.Duration
	// Timeout, when positive, bounds the whole run; a run that times out is reported as
	// incomplete.
	Timeout time.Duration
	// BucketWidth is the width of the report's time series buckets. Default: about 1/100 of the
	// run, rounded.
	BucketWidth time.Duration

	// Progress, when not nil, receives progress lines: rewritten in place with \r every 250ms when
	// TTY is true, one plain line every ProgressInterval (default 2s) otherwise.
	Progress         io.Writer
	TTY              bool
	ProgressInterval time.Duration

	// AfterSend, when not nil, is called once every record was sent and acknowledged, before
	// the verifier waits for the output; an error ends the run with that error. The moment it
	// returns starts the drain measurement (Throughput.DrainRate): with a pipeline that only
	// starts in AfterSend, that is the pipeline's throughput on a preloaded input topic.
	AfterSend func(ctx context.Context) error

	// At and Do: when Do is not nil, it is called in its own goroutine once At records were
	// created (for example to restart the worker in the middle of a run). The run waits for it to
	// return before it stops reading the output; an error it returns fails the run.
	At int
	Do func(ctx context.Context) error

	// Hooks are further actions, each called like Do once its At records were created, each in
	// its own goroutine. The run waits for all of them before it stops reading the output; one
	// that fails fails the run. Report.Hooks says when each was called and how long it took.
	Hooks []Hook

	// ProduceBatch is the maximum number of records of one produce request (which also stays
	// under about 512KiB). Default 500.
	ProduceBatch int
	// Linger is how long a partition's records may wait for more before they are produced.
	// Default 5ms.
	Linger time.Duration
}

// DefaultEntities, DefaultKeySize, DefaultValueSize and DefaultSettle are the defaults of the Config
// fields that the loadtest command also takes as flags (-entities, -key-size, -value-size,
// -settle), whose defaults they are too.
const (
	DefaultEntities  = 1000
	DefaultKeySize   = 16
	DefaultValueSize = 100
	DefaultSettle    = 5 * time.Second
)

// withDefaults returns c with every zero field that has a default set to it. Unlike the worker's
// configuration, which internal/app fills from the environment, loadtest.Config is a library's: its
// callers (the loadtest command, tests) set what they care about.
func (c Config) withDefaults() Config {
	if c.Entities == 0 {
		c.Entities = DefaultEntities
	}
	if c.KeySize == 0 {
		c.KeySize = DefaultKeySize
	}
	if c.ValueSize == 0 {
		c.ValueSize = DefaultValueSize
	}
	if c.Mix == (Mix{}) {
		c.Mix = DefaultMix
	}
	n, iv := time.Duration(c.WindowCount), c.WindowInterval
	if c.WithinMax == 0 {
		c.WithinMax = (n - 1) * iv / 2
	}
	if c.BeyondMin == 0 {
		c.BeyondMin = n*iv + iv/4
	}
	if c.BeyondMax == 0 {
		c.BeyondMax = max(n*iv+3*iv/4, c.BeyondMin)
	}
	if c.Settle == 0 {
		c.Settle = DefaultSettle
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = 2 * time.Second
	}
	if c.ProduceBatch == 0 {
		c.ProduceBatch = 500
	}
	if c.Linger == 0 {
		c.Linger = 5 * time.Millisecond
	}
	if c.OversizeBytes == 0 {
		c.OversizeBytes = DefaultOversizeBytes
	}
	return c
}

// Validate reports every problem of c (after defaults) joined into one error, or nil.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("loadtest: "+format, a...)) }
	if len(c.Brokers) == 0 {
		bad("no brokers")
	}
	if c.InputTopic == "" || c.OutputTopic == "" {
		bad("input and output topics are required")
	} else if c.InputTopic == c.OutputTopic {
		bad("input and output topic are both %q", c.InputTopic)
	}
	if c.Count < 1 || c.Count > math.MaxUint32 {
		bad("count must be in [1, %d], got %d", uint32(math.MaxUint32), c.Count)
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		bad("rate must be 0 (as fast as possible) or positive, got %v", c.Rate)
	}
	if c.Entities < 1 || c.Entities > math.MaxUint32 {
		bad("entities must be positive, got %d", c.Entities)
	}
	if c.KeySize < 0 || c.ValueSize < 0 || c.KeySize > 1<<20 || c.ValueSize > 1<<20 {
		bad("key and value sizes must be in [0, 1MiB]")
	}
	if !(c.DupRatio >= 0 && c.DupRatio <= 0.95) {
		bad("duplicate ratio must be in [0, 0.95], got %v", c.DupRatio)
	}
	if !(c.Late >= 0 && c.Late <= 0.95-c.DupRatio) {
		bad("late fraction must be in [0, 0.95 - duplicate ratio], got %v", c.Late)
	}
	if c.Sources < 0 || c.Sources > 1000 {
		bad("sources must be in [0, 1000], got %d", c.Sources)
	}
	m := c.Mix
	if m.Immediate < 0 || m.Within < 0 || m.Beyond < 0 || m.Cross < 0 || math.IsNaN(m.total()) || math.IsInf(m.total(), 0) {
		bad("duplicate mix weights must be non-negative numbers")
	} else if c.DupRatio > 0 && m.total() == 0 {
		bad("duplicate mix has no positive weight")
	}
	if c.WindowCount < 1 || c.WindowInterval <= 0 {
		bad("window count (>= 1) and interval (> 0) are required, got %d and %v", c.WindowCount, c.WindowInterval)
	}
	if c.WithinMax < 0 || c.BeyondMin < 0 || c.BeyondMax < c.BeyondMin {
		bad("delays must satisfy 0 <= within-max and 0 <= beyond-min <= beyond-max")
	}
	if c.DupRatio > 0 && m.Cross > 0 && c.Field.Kind != FieldKey && c.Entities < 2 {
		bad("cross-partition duplicates need at least 2 entities")
	}
	if !c.ExpectAll && !(c.FalsePositiveRate > 0 && c.FalsePositiveRate < 1) {
		bad("false-positive rate must be in (0, 1), got %v", c.FalsePositiveRate)
	}
	if c.Settle < 0 || c.Timeout < 0 || c.BucketWidth < 0 || c.ProgressInterval < 0 || c.Linger < 0 {
		bad("durations must not be negative")
	}
	for _, h := range c.hooks() {
		if h.Do == nil {
			bad("the hook %q has no function", h.Name)
		}
		if h.At < 0 || h.At > c.Count {
			bad("the record count %d of the hook %q is outside [0, %d]", h.At, h.Name, c.Count)
		}
	}
	if c.ProduceBatch < 1 {
		bad("produce batch must be positive")
	}
	if c.Oversize < 0 || c.Oversize > c.Count/2 || c.OversizeBytes < 1<<10 || c.OversizeBytes > 64<<20 {
		bad("oversized records must be in [0, count/2] (got %d), of a size in [1KiB, 64MiB] (got %d)", c.Oversize, c.OversizeBytes)
	}
	if c.AuditTopic != "" && (c.AuditTopic == c.InputTopic || c.AuditTopic == c.OutputTopic || c.AuditTopic == c.DeadLetterTopic) {
		bad("the audit topic %q must differ from the input, output and dead-letter topics", c.AuditTopic)
	}
	if c.DeadLetterTopic != "" && (c.DeadLetterTopic == c.InputTopic || c.DeadLetterTopic == c.OutputTopic) {
		bad("the dead-letter topic %q must differ from the input and output topics", c.DeadLetterTopic)
	}
	return errors.Join(errs...)
}
