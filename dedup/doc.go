// Package dedup decides which records are duplicates. It owns two things: the record identity
// (KeySpec, from the DEDUP_KEY setting: the Kafka key, the whole value, a header, or a field of a
// JSON value) and the scope of the memory of seen identities (Set: one sliding-window filter per
// input partition, or one global filter). It knows nothing of Kafka clients; the consumer package
// feeds it partitions and record bytes.
//
// With a Persister a Set snapshots its filters (persist.go) and re-warms restored ones from the
// output topic through an OutputLog, so that a partition's state follows it to another replica.
// Across rebalances it keeps the filters of revoked partitions that may come straight back
// (retain.go), and rebuilds a filter that has no usable snapshot from the output records of the
// window through an OutputHistory (rebuild.go).
package dedup
