// Package dedup decides which records are duplicates. It owns two things: the record identity
// (KeySpec, from the DEDUP_KEY setting: the Kafka key, the whole value, a header, or a field of a
// JSON value) and the scope of the memory of seen identities (Set: one sliding-window filter per
// input partition, or one global filter). It knows nothing of Kafka clients; the consumer package
// feeds it partitions and record bytes.
package dedup
