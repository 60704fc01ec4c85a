// Package loadtest generates a deterministic stream of records with known duplicates into a Kafka
// input topic, reads what a deduplication stage wrote to the output topic, and proves the result:
// duplicates that leaked through, unique events that were lost (false positives, compared with a
// Poisson bound for the configured false-positive rate), per-key order violations, end-to-end
// latency and sustained throughput.
//
// # Event identity
//
// Every generated record carries a unique event id (16 hex digits) in the deduplication field
// (the Kafka key, the whole value, a header or a JSON path) and three headers: lt-run (the run id,
// so that records of other runs in the same topics are ignored), lt-seq (the send sequence number,
// increasing in send order on every partition) and lt-sent (the Unix time in nanoseconds at which
// the record was created). A duplicate re-sends the event id of an earlier original:
//
//   - immediate: right after the original, on the same partition: must be dropped;
//   - within: less than (N−1)·interval later on the same partition: must be dropped;
//   - beyond: more than N·interval later on the same partition: must pass again;
//   - cross: within the window but on another partition: dropped only under scope global.
//
// The generator keeps a send log (sequence number → event, kind, partition, creation time). The
// verifier combines it with what it read from the output to decide, per event, what must have
// happened. Because the window rotates on the worker's clock, which the verifier cannot see, each
// judgement uses sound bounds on the worker's processing time (never before a record was created,
// never after it, or a later record of the same input partition, was seen in the output); a copy
// whose fate these bounds cannot decide is counted as ambiguous, never as a failure.
//
// # Determinism
//
// The plan (which records are originals, how many duplicates each gets, of which kind, with which
// delay, on which entity and partition) is drawn from a PRNG seeded with Config.Seed, one original
// at a time, so it does not depend on timing. Event ids are salted with Config.RunID so that runs
// against a long-lived worker do not collide. With a fixed rate the send order follows the plan's
// schedule; with rate 0 (as fast as possible) a delayed duplicate is sent at the first opportunity
// after its due time, so the interleaving depends on how fast the brokers accept records.
//
// The package never reads environment variables; cmd/kdedup builds a Config from flags and the
// environment.
package loadtest
