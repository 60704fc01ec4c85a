// Package dedup decides which records are duplicates: it owns the scope of the memory of seen
// identities (Set: one sliding-window filter per input partition, or one global filter). What
// identifies a record (DEDUP_KEY) is the identity package's; the consumer package extracts the
// identities and feeds them to a Set with their partitions. It knows nothing of Kafka clients.
//
// Files by concern: config.go (Config and its defaults), set.go (the Set: routing and the hot
// path), assign.go (preparing a partition's state on Assign, giving it up on Revoke), snapshot.go
// (the snapshot protocol and the interfaces it works through), saves.go (how saves are scheduled
// and bounded), persist.go (the checkpoint-backed Persister), epoch.go (owner epochs that fence a
// lost owner's saves), skew.go (the clock skew a restore warns of), scope.go (what differs
// between scopes, behind one type chosen when the Set is built), retain.go, rebuild.go, global.go
// (the global scope, and its filter after a Discard) and eventtime.go.
//
// With a Persister a Set snapshots its filters (persist.go) and re-warms restored ones from the
// output topic through an OutputLog, so that a partition's state follows it to another replica.
// Across rebalances it keeps the filters of revoked partitions that may come straight back
// (retain.go), and rebuilds a filter that has no usable snapshot from the output records of the
// window, read from the OutputLog by time (rebuild.go).
//
// # Event time
//
// Under Config.Clock = ClockEvent (eventtime.go) a filter's generations follow the records'
// timestamps instead of the wall clock. Each filter has a stream time: the highest record
// timestamp it has seen, per partition under ScopePartition and shared under ScopeGlobal (where the
// fastest partition drives it, and records of a partition that lags the others by more than the
// window become late). A record that opens a later generation rotates the filter
// (window.Filter.AdvanceEventTo) on the calling goroutine; nothing rotates in the background, so an
// idle partition does not age. Seen tests the identity against every live generation and adds it
// to the generation of the record's timestamp (window.Filter.TestAndAddAt), so that an
// out-of-order record expires by its own time. A record stamped before the oldest live generation
// is late: counted, and passed or dropped by Config.LateRecords. A timestamp more than
// Config.MaxAhead ahead of the wall clock advances the stream time only to that cap, and the record
// is judged there. The hot path reads one cached boundary per record; only a record that crosses
// it takes the wall clock and rotates.
//
// A restored, kept or rebuilt filter resumes at the start of its current generation: snapshots keep
// no exact stream time and need none (see eventClock.resume), so the snapshot format is unchanged.
// Re-warm and rebuild pass each output record's timestamp, and the identity goes to the generation
// of that timestamp, the stream time advancing as it would for live records.
package dedup
