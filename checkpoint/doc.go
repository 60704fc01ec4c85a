// Package checkpoint persists snapshots of kdedup's sliding-window Bloom
// filter so a restarted worker resumes with the keys it had seen.
//
// The package is a leaf: it knows nothing about Bloom filters beyond a
// Header of metadata and opaque data made of little-endian 64-bit words. The
// dedup package maps the filter's snapshot metadata to a Header and streams
// the words through Encode; on restore it validates the Header and reads the
// words back through a Decoder.
//
// # Format
//
// A snapshot is a versioned binary file: magic "KDDPSNAP", a uint16 format
// version (Encode writes version 3, the sectorized layout with use-tagged
// words; the decoder also reads versions 1 and 2, whose data is in the
// layout of an older kdedup's filter, so that they can be inspected), a
// length-prefixed header body with the filter parameters, the generation
// table, the slot use table, the epoch, the scope, the input and output
// offsets the snapshot covers and its creation time, a CRC32C of
// everything so far (so a header can be validated without reading the
// data), the word count and words, and a final CRC32C of the whole file.
// The exact byte layout is documented on Decoder. Encode streams: the data
// is written through a buffer with the checksum computed on the fly, and
// Decoder.ReadWords reads into the caller's own slice in large chunks, so
// neither side ever holds a second copy of a multi-GiB filter. Damaged input
// yields errors wrapping ErrCorrupt, ErrNotSnapshot or ErrUnknownVersion,
// never a panic, and no length field is trusted before it has been bounded
// (see the Max* constants).
//
// # Storage and the atomic write protocol
//
// Snapshots live in a Store under a unit name such as "orders.p3" or
// "global". Open turns a store URL into a Store: "file:///dir" is a
// DirStore, "s3://bucket/prefix" an S3Store.
//
// DirStore keeps snapshots as files "<unit>.<seq>.snap" in one directory,
// possibly shared by several replicas: Save writes to a temporary file whose
// name is unique per process and call, fsyncs it, renames it into place and
// fsyncs the directory, so a crash never leaves a partial snapshot visible.
// It does all of that through an FS (OSFS by default); checkpoint/errorfs
// wraps one to fail writes, fsyncs, renames, directory fsyncs and reads in
// tests, which prove that no such failure loses the previous snapshot.
//
// S3Store keeps them as objects "<prefix><unit>.<seq>.snap" in an S3 bucket
// or an S3-compatible service (MinIO, R2, Ceph). An object appears only
// complete, on PutObject or CompleteMultipartUpload; Save streams the
// snapshot in bounded part buffers and aborts the multipart upload on any
// failure. Both stores list a unit before saving and number the new
// snapshot above the newest one, so replicas with skewed clocks still order
// their snapshots correctly.
//
// S3Store uses the AWS SDK for Go v2, whose default configuration chain
// reads the standard AWS_* variables and ~/.aws files itself (credentials,
// web identity, container and instance-profile credentials). That chain is
// the one place outside cmd/kdedup where the process environment is read;
// everything kdedup configures itself arrives in S3Options.
//
// # Retention and fallback
//
// Stores keep the newest Keep snapshots per unit (DefaultKeep = 3) and
// delete older ones after every save. Load restores a unit newest first:
// a snapshot that is corrupt, foreign, of an unknown version, or rejected by
// the caller as incompatible (ErrIncompatible) is recorded and the previous
// one tried. The Outcome — warm, fallback or cold — is meant for the
// kdedup_checkpoint_restores_total{outcome} metric; LoadResult.Failures and
// LoadResult.Err say what was rejected and why.
//
// # Inspection
//
// Inspect prints a human-readable report of a snapshot file — header,
// per-generation fill, estimated keys and false positive rate, covered
// offsets, checksum status — and is exposed as `kdedup inspect FILE`.
package checkpoint
