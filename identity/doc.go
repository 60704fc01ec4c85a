// Package identity says what identifies a Kafka record for deduplication, and reads it: the key
// grammar of DEDUP_KEY and DEDUP_METRICS_SOURCE (Spec, Parse, ParseSource) and the Extractor that
// follows a Spec over a record's key, value and headers.
//
// An extraction has three outcomes: an identity; the permanent reason the record has none (a
// Reason, from a fixed set, so it can label a metric); or a temporary failure (an error wrapping
// ErrRetry), after which the caller holds the record and tries again instead of treating it as
// unkeyed. Which records pass unkeyed is therefore decided by the record, never by an outage.
//
// The package is a leaf: it imports nothing of kdedup and no Kafka client, so that the consumer,
// dedup, loadtest and anything that routes records by identity can share one grammar.
//
// Files: spec.go (the grammar), extract.go (the Extractor and the schema-free kinds), jsonpath.go
// (the streaming JSON path reader).
package identity
