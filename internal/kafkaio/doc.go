// Package kafkaio is kdedup's Kafka wire layer: every Kafka byte kdedup sends or receives is
// encoded, decoded or requested here, on top of kafka-go's Client, Transport and Dialer (the
// project's Kafka client), which it builds and which it fills in where kafka-go lacks something.
// The consumer (the worker), the loadtest and the embedded broker's tooling use it; it imports
// nothing of kdedup.
//
//   - conn.go: Conn, the one connection config (brokers, client ID, TLS, SASL), and the Client,
//     Transport and Dialer every connection is made with; sasl.go: NewSASL, the SASL mechanisms
//     (PLAIN, SCRAM-SHA-256/512, AWS_MSK_IAM) as a *SASL that names its user and never prints
//     its credentials; check.go: Conn.Check and CheckRead, the one classification of connection
//     failures retrying cannot fix (*ConnError: ErrAuthentication, ErrTLS, ErrAuthorization;
//     Fatal, Denied, AuthFailed) and of throttling (ErrThrottled, Throttled, RetryReason);
//     reauth.go, saslwire.go: Conn's own dial (TCP, TLS, SASL with SaslAuthenticate v1) and the
//     connection that re-authenticates its SASL session in place before the broker's lifetime
//     ends (KIP-368).
//   - produce.go, sequencer.go, producerid.go: Producer, the one produce path: requests split at
//     BatchBytes, one batch in flight per partition, retries of the same bytes, and idempotent
//     production (producer ids, sequence numbers, resets); brokerproduce.go: the batches of the
//     partitions a broker leads sent to it together, a few requests in flight per broker;
//     leaders.go: leaderCache, the partition leaders that the per-broker fetches and produce
//     requests are routed by; refuse.go: records the brokers refuse
//     (batches bounded by the topic's max.message.bytes, split when refused, RefusedError for a
//     record refused on its own); txn.go: transactions (Begin, SendOffsets, Commit, Abort) and
//     fencing by transactional id (ErrFenced), CommittedOffsets.
//   - batch.go: record batches (format v2) encoded for the producer and decoded in place
//     (BatchDecoder), with franz-go's kmsg for the batch header; decode.go: bounded decoding
//     (DecodeLimits): decompression through a limit, records framed, then decoded one at a time
//     with their headers capped, and RefusedInput for what goes over a limit or cannot be decoded.
//   - fetch.go: raw Fetch requests through kafka-go's Transport (one response buffer each, decoded
//     in place with kmsg) and Isolation; records.go: the walk of a fetched partition's batches
//     (control records never data, aborted transactions skipped under ReadCommitted, a batch
//     that yields nothing still passed); epoch.go: leader epochs (KIP-320), raw Metadata and
//     OffsetForLeaderEpoch requests; diverge.go: what a PartitionReader does with them (a
//     truncated log, a re-created topic).
//   - input.go: PartitionReader, the worker's input fetch path: a fetch loop of our own, one fetch
//     in flight, records handed out as slices into recycled buffers, offset resets (a backward
//     one handed out as a rewound Batch), a corrupt batch refused; fetchpool.go: FetchPool, which
//     sends the fetches of many readers as one request per broker, routed to each partition's
//     leader; brokerfetch.go: one broker's fetch loop in a fetch session (KIP-227), each answer
//     copied into its reader's buffers, a partition whose reader holds an answer left out;
//     read.go: Read, the one way to read a range of a partition, on the same fetch; metadata.go:
//     partition counts, offsets (the last stable offset under ReadCommitted) and topic
//     configuration.
//   - sticky.go: StickyBalancer, the consumer group assignor and its UserData format;
//     heartbeat.go: Heartbeats, which keep a member in its group while it releases partitions
//     after kafka-go stopped heartbeating.
//   - backoff.go: Backoff, the one retry policy; log.go: Sampler, the sampled log of retried
//     failures.
//
// Errors carry the "kafkaio: " prefix and wrap kafka-go's errors, so errors.Is works with
// kafka.Error values such as kafka.UnknownTopicOrPartition.
package kafkaio
