package dedup

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kdedup/kdedup/checkpoint/snapshot"
	"github.com/kdedup/kdedup/window"
)

// Scope says which records share a filter.
type Scope string

// The scopes a Set offers. A scope is a name for operators (DEDUP_SCOPE); what a snapshot records
// is its kind's (see scopeKinds), so that a scope can be added without a format change.
const (
	// ScopePartition keeps one filter per input partition. A partition's state can move to another
	// replica on rebalance, and duplicates are only caught within a partition. It is the default.
	ScopePartition Scope = snapshot.ScopePartition
	// ScopeGlobal keeps one filter for all partitions, so that duplicates that arrive on different
	// partitions are caught too. It suits single-replica deployments: replicas do not share it.
	ScopeGlobal Scope = snapshot.ScopeGlobal
	// ScopeRouted is stage 2 of the routed scope: the Set's input is the route topic, whose
	// partitions each hold every copy of their identities (consumer.PartitionIdentity), and it
	// keeps one filter per route partition exactly as ScopePartition does per input partition.
	// Its snapshots record ScopePartition: their unit is a partition of the route topic (Topic).
	ScopeRouted Scope = "routed"
)

// ParseScope returns the Scope named s (ScopePartition, ScopeGlobal or ScopeRouted).
func ParseScope(s string) (Scope, error) {
	if _, ok := scopeKinds[Scope(s)]; ok {
		return Scope(s), nil
	}
	return "", fmt.Errorf("dedup: unknown scope %q (want %s, %s or %s)", s, ScopePartition, ScopeGlobal, ScopeRouted)
}

// parseChoice returns s as a T if it names a or b, else an error that names what, s and both
// choices. It parses the two-valued settings of a Set (Scope, Clock, LatePolicy).
func parseChoice[T ~string](what, s string, a, b T) (T, error) {
	if v := T(s); v == a || v == b {
		return v, nil
	}
	return "", fmt.Errorf("dedup: unknown %s %q (want %s or %s)", what, s, a, b)
}

// Config configures a Set.
type Config struct {
	// Scope selects per-partition or global filters. Default: ScopePartition.
	Scope Scope
	// Window configures each filter. Under ScopePartition, Capacity is per partition and
	// SingleWriter is set (one goroutine writes each partition's filter, see Set.Seen); under
	// ScopeGlobal SingleWriter is cleared. Window.Clock is the wall clock: it rotates filters under
	// ClockProcessing, and bounds stream time (MaxAhead) and places the rebuild under ClockEvent,
	// where each filter gets its stream time as its own Clock. With Window.Budget set, every
	// filter of the Set draws on that one budget, and the Set releases a filter's memory to it
	// when it drops the filter (a discarded or closed partition, a parked filter that did not come
	// back, a replaced global filter).
	Window window.Config
	// Topic names the input topic; it prefixes snapshot unit names. Default: "input".
	Topic string
	// Persister saves and restores filters. Default: nil, no persistence; every filter starts cold.
	Persister Persister
	// CheckpointInterval is how often every filter is snapshotted in the background, besides on
	// Revoke and Close. Default: 0, only on Revoke and Close.
	CheckpointInterval time.Duration
	// SealTimeout bounds how long a snapshot waits for the records it may contain to be
	// acknowledged by the output topic. Default: 30s.
	SealTimeout time.Duration
	// SaveConcurrency bounds the saves a Set runs at once: periodic checkpoints of many
	// partitions, and the final saves of the partitions a rebalance or the shutdown releases
	// together, run in parallel up to it. Default: DefaultSaveConcurrency.
	SaveConcurrency int
	// Output is the output topic: snapshots record its end offsets, a restored filter is re-warmed
	// from the records after them, and a rebuild reads it. Default: nil, snapshots record no
	// output offsets, restored filters are not re-warmed and nothing is rebuilt.
	Output OutputLog
	// Observer receives checkpoint measurements. Default: none.
	Observer CheckpointObserver
	// Logger receives lifecycle messages (never one per record). Default: slog.Default().
	Logger *slog.Logger
	// RebuildMaxRecords, when positive, makes a unit that has no usable snapshot (or no Persister)
	// rebuild its filter from the output records of the window instead of starting empty, reading
	// at most this many records: the newest; the older ones are skipped, logged and counted, and
	// their duplicates can pass (see Set.rebuild). It needs an Output. Default: 0, no rebuild.
	RebuildMaxRecords int64
	// ProcessedTime says that the Output reports each record's processing time (the worker's
	// processed-time header) as its time, not the record's timestamp: a rebuild under
	// ClockProcessing then also reads the records processed within the window but stamped
	// before it, after a catch-up (see "Rebuild after a catch-up" in rebuild.go). Default:
	// false, the rebuild selects by timestamp alone and reports that to the Observer
	// (RebuildByRecordTime).
	ProcessedTime bool
	// Clock selects the time the windows follow: the worker's wall clock or the records'
	// timestamps (see "Event time" in the package documentation). Default: ClockProcessing.
	Clock Clock
	// LateRecords says what happens under ClockEvent to a record stamped before its filter's
	// oldest live generation, which cannot be judged: under LateDrop, Seen reports it as a
	// duplicate. Default: LatePass.
	LateRecords LatePolicy
	// MaxAhead caps, under ClockEvent, how far ahead of the wall clock (Window.Clock) a record's
	// timestamp may advance a filter's stream time; a record stamped later is judged at the cap.
	// Default: DefaultMaxAhead.
	MaxAhead time.Duration
	// Refresh makes a duplicate re-arm its identity (window.Filter.TestAndRefresh): the window
	// then counts from an identity's last sighting, not its first, so that an identity re-sent
	// more often than the window is remembered as long as it keeps coming. Under ClockEvent the
	// re-arm goes to the generation of the record's timestamp. Re-warm and rebuild add what the
	// output topic holds, as without Refresh: a rebuilt filter knows an identity from its last
	// passed record. Default: false.
	Refresh bool
}

// DefaultMaxAhead is Config.MaxAhead's default, and DEDUP_EVENT_TIME_MAX_AHEAD's (a test of
// internal/app holds the two equal): an hour of producer clock skew, whatever the window.
const DefaultMaxAhead = time.Hour

// defaultClock fills in and checks the event-time settings.
func (cfg *Config) defaultClock() error {
	if cfg.Clock == "" {
		cfg.Clock = ClockProcessing
	}
	if cfg.LateRecords == "" {
		cfg.LateRecords = LatePass
	}
	if cfg.MaxAhead <= 0 {
		cfg.MaxAhead = DefaultMaxAhead
	}
	if _, err := ParseClock(string(cfg.Clock)); err != nil {
		return err
	}
	_, err := ParseLatePolicy(string(cfg.LateRecords))
	return err
}

// setDefaults fills in cfg's defaults and checks it: the scope, the window (window.Size), the
// event-time settings and what a rebuild needs. It returns the first problem.
func (cfg *Config) setDefaults() error {
	if cfg.Scope == "" {
		cfg.Scope = ScopePartition
	}
	if _, err := ParseScope(string(cfg.Scope)); err != nil {
		return err
	}
	if cfg.Topic == "" {
		cfg.Topic = "input"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SealTimeout <= 0 {
		cfg.SealTimeout = 30 * time.Second
	}
	if cfg.SaveConcurrency <= 0 {
		cfg.SaveConcurrency = DefaultSaveConcurrency
	}
	if err := cfg.defaultClock(); err != nil {
		return err
	}
	if _, err := window.Size(cfg.Window); err != nil {
		return fmt.Errorf("dedup: %w", err)
	}
	if cfg.RebuildMaxRecords > 0 && cfg.Output == nil {
		return errors.New("dedup: RebuildMaxRecords needs an Output")
	}
	// A partition's records reach Seen from one goroutine, after Assign's re-warm or rebuild (which
	// run in the caller of Assign, the partition's goroutine): its filter can skip the atomic
	// read-modify-writes. A filter kept across a rebalance is written by the next generation's
	// goroutine only after the previous one returned.
	cfg.Window.SingleWriter = !cfg.Scope.kind().shared
	return nil
}
