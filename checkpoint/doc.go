// Package checkpoint keeps snapshots of kdedup's sliding-window Bloom filters so that a restarted
// worker, or the replica a partition moves to, resumes with the keys they had seen. It is a leaf:
// it imports nothing of kdedup but its own subpackage snapshot, the file format (encode, decode,
// inspect), and knows nothing about Bloom filters beyond the snapshot Header.
//
// # One store policy over narrow backends
//
// A Store keeps the snapshots of named units ("orders.p3", "global") in a Backend, and is the one
// place where the rules of keeping them live: naming ("<unit>.<seq>.snap"), numbering (Info.Seq:
// monotonic across restarts and across replicas sharing a location, whatever their clocks),
// per-unit locking, retention (the newest Keep snapshots per unit, DefaultKeep = 3) and the sweep
// of abandoned partial writes. A Backend only creates, opens, lists and deletes named immutable
// objects (and sweeps its own partial writes):
//
//   - DirBackend keeps them as files in one directory, possibly shared by several replicas. Create
//     writes a temporary file, fsyncs it, renames it into place and fsyncs the directory, so a
//     crash never leaves a partial object visible. It does all of that through an FS (OSFS by
//     default); checkpoint/errorfs wraps one to fail writes, fsyncs, renames, directory fsyncs and
//     reads in tests, which prove that no such failure loses the previous snapshot.
//   - S3Backend keeps them as objects "<prefix><name>" in an S3 bucket or an S3-compatible service
//     (MinIO, R2, Ceph). An object appears only complete, on PutObject or
//     CompleteMultipartUpload; Create streams in bounded part buffers and aborts the multipart
//     upload on any failure, and Sweep aborts uploads abandoned by a process that died. It uses the
//     AWS SDK for Go v2, whose default configuration chain reads the standard AWS_* variables and
//     ~/.aws files itself (credentials, web identity, container and instance-profile
//     credentials): the one place outside cmd/kdedup where the process environment is read;
//     everything kdedup configures itself arrives in S3Options.
//   - MemBackend keeps them in memory, for unit tests.
//
// Open turns a store URL into a Store: "file:///dir" over a DirBackend, "s3://bucket/prefix" over
// an S3Backend. One contract test runs every Store guarantee against all three backends (and
// against a moto_server process; checkpoint/s3test serves S3 in-process with fault injection).
//
// Objects of a unit other than its numbered snapshots fit the same policy: every name of a unit
// starts with "<unit>.", and List and Prune only touch the names they parse.
//
// # Restore and fallback
//
// Load restores a unit newest first: a snapshot that is corrupt, foreign, of an unknown version,
// or rejected by the caller as incompatible (ErrIncompatible) is recorded and the previous one
// tried. The Outcome — warm, fallback or cold — is meant for the
// kdedup_checkpoint_restores_total{outcome} metric; LoadResult.Failures and LoadResult.Err say
// what was rejected and why. An I/O error is not a bad snapshot: Load stops and returns it, since
// a cold start would forget keys the snapshot remembers.
package checkpoint
