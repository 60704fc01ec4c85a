// Package identity says what identifies a Kafka record for deduplication, and reads it: the key
// grammar of DEDUP_KEY and DEDUP_METRICS_SOURCE (Spec, Parse, ParseSource) and the Extractor that
// follows a Spec over a record's key, value and headers.
//
// An extraction has three outcomes: an identity; the permanent reason the record has none (a
// Reason, from a fixed set, so it can label a metric); or a temporary failure (an error wrapping
// ErrRetry), after which the caller holds the record and tries again instead of treating it as
// unkeyed. Which records pass unkeyed is therefore decided by the record, never by an outage.
//
// # Avro and Protobuf
//
// avro:PATH and protobuf:PATH (avro-key:PATH, protobuf-key:PATH for the Kafka key) read a field of
// a record in Confluent's wire format: magic byte 0, the schema id (4 bytes, big-endian), for
// Protobuf the message index list (a zig-zag varint count, then the indexes; a single 0 byte
// means [0]), then the body. The schema comes from a schema registry (Registry; HTTPRegistry
// speaks Confluent's REST API) once per id for the life of the process, and is compiled once per
// id into a plan: which fields to skip at each level on the way, and which union branch or which
// message (by its indexes) holds the path. Extraction then skips to the field over the binary
// encoding without decoding the rest and without allocating.
//
// The identity is the field's value in a canonical form that a newer schema version does not
// change (fields added, optional fields moved, int promoted to long): the contents of a string,
// bytes or fixed; the symbol of an Avro enum; the zig-zag varint of an Avro int or long; the
// varint of a Protobuf integer, bool or enum as written; the bytes of a float, double or
// Protobuf fixed field. A null (an Avro union's null branch), a missing Protobuf field or an empty
// string has no identity (Missing). A path that ends at a record, message, array, map or repeated
// field, or that the schema does not have, gives NotInSchema for every record of that schema. In
// Protobuf a message field that occurs several times is merged and the last scalar wins, as the
// language says, so each level of the path is read to its end.
//
// The package is a leaf: it imports nothing of kdedup and no Kafka client, so that the consumer,
// dedup, loadtest and anything that routes records by identity can share one grammar.
//
// Files: spec.go (the grammar), extract.go (the Extractor and the schema-free kinds), jsonpath.go
// (the streaming JSON path reader), schema.go (the schema cache and the wire format), avro.go
// (Avro plans over schemas parsed by hamba/avro), protoparse.go and protobuf.go (a .proto parser of
// the subset an identity needs, and Protobuf plans), registry.go (the schema registry client);
// registrytest serves the registry API in tests.
package identity
