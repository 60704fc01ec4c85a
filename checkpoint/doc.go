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
// ParseURL and OpenLocation turn a store URL into a Store: "file:///dir" over a DirBackend,
// "s3://bucket/prefix" over an S3Backend. One contract test runs every Store guarantee against all three backends (and
// against a moto_server process; checkpoint/s3test serves S3 in-process with fault injection).
//
// Objects of a unit other than its numbered snapshots fit the same policy: every name of a unit
// starts with "<unit>.", and List and Prune only touch the names they parse.
//
// # Incremental checkpoints
//
// Store.SaveSet saves a checkpoint made of generation objects ("<unit>.<seq>.<tok>.gen", one per
// live generation of the filter, see snapshot.GenDecoder) and a manifest that references them
// (the snapshot "<unit>.<seq>.snap", version 6). A generation that did not change since the last
// checkpoint is not written again: the new manifest references the object an earlier save wrote,
// as long as the store still lists it (Txn.Exists). So a checkpoint costs what changed — usually
// the current generation and a manifest of a few KiB — and the store holds each sealed
// generation once, however many kept manifests reference it.
//
// The manifest is the commit point. SaveSet creates it last, after every object it references is
// durable (on a directory: each object fsynced, renamed and its directory fsynced; on S3: each
// object complete before the manifest's upload starts), and checks before that that it references
// only objects of the save or objects listed when the save began. So listing or reading a
// manifest never finds a missing generation, unless something deleted it since (see below). A
// save that fails before the commit deletes the objects it created.
//
// Retention works by reference: after a save, Prune keeps the newest Keep snapshots as before, and
// deletes the generation objects that none of them references and that no save under way can
// still reference: those written by a save numbered below the oldest kept snapshot (a save numbers
// itself above every snapshot it lists), and those older than StaleTempAge. The objects a
// manifest references are read from its header, once per process (a Store caches them; it never
// reads the manifests it wrote). Two replicas saving the same unit at the same time (a partition
// owned twice during a handover race) can still lose a checkpoint: one's prune may delete objects
// of the other's save under way, whose manifest then references a missing object; restore falls
// back from such a manifest like from a damaged one.
//
// # Restore and fallback
//
// Load restores a unit newest first: a snapshot that is corrupt, foreign, of an unknown version,
// or rejected by the caller as incompatible (ErrIncompatible) is recorded and the previous one
// tried. For a manifest the caller reads the generation objects it references
// (Store.OpenGeneration), which checks each against the reference: a missing, damaged or
// replaced object condemns the manifest, and Load tries the previous one. A sealed generation is
// stored once, so a damaged one condemns every kept manifest that references it: restore then
// falls back to a manifest or single-file snapshot older than that generation, or starts cold. The Outcome — warm, fallback or cold — is meant for the
// kdedup_checkpoint_restores_total{outcome} metric; LoadResult.Failures and LoadResult.Err say
// what was rejected and why. An I/O error is not a bad snapshot: Load stops and returns it, since
// a cold start would forget keys the snapshot remembers.
package checkpoint
