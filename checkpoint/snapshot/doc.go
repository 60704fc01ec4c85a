// Package snapshot is the file format of kdedup's checkpoints: it encodes,
// decodes and inspects the snapshots of a sliding-window Bloom filter. It
// knows nothing about where snapshots are kept (package checkpoint stores
// them) nor about Bloom filters beyond a Header of metadata and opaque data
// made of little-endian 64-bit words: the dedup package maps the filter's
// snapshot metadata to a Header and streams the words through an encoder; on
// restore it validates the Header and reads the words back through a decoder.
//
// # Format
//
// A checkpoint is a manifest (EncodeManifest writes CurrentVersion, version
// 7: version 6 with the owner epoch of the replica that saved it and the key
// spec of its identities) and the generation objects it references, one per
// live generation (NewGenEncoder, version 6). The manifest is a versioned binary file: magic
// "KDDPSNAP", a uint16 format version, a length-prefixed header body with
// the filter parameters, the generation table, the slot use table, the stage
// table, the epoch, the scope, the input and output offsets the snapshot
// covers, its creation time, the references to its generation objects
// (name, size, checksum) and the key spec its identities were extracted with
// (version 7: a filter is never restored under another identity), a CRC32C
// of everything so far, and a final CRC32C.
// A generation object (magic "KDDPGENR") holds one generation's words in a
// canonical form that does not depend on the filter's memory layout, stored
// compactly: runs of empty chunks, Rice-coded gaps between the set bits of
// sparse chunks, and dense chunks as they are, with a checksum over what is
// decoded. A generation that no longer changes is written once and
// referenced by every later manifest, so a checkpoint costs what changed,
// and a lightly loaded generation costs what its keys take, not its
// capacity.
//
// Snapshots of version 5 and older hold their data themselves, after the
// header (version 5, the newest of them: the generation-interleaved
// layout, sector 0 of a block stored word-major; kdedup no longer writes
// it, and only tests do, through checkpoint/snapshot/snapshottest); the decoder reads every version from MinVersion on: version
// 5 restores, versions 1 to 4 hold the data in the layout of an older
// kdedup's filter and only decode for inspection. The exact byte layouts, the format's one
// specification, are documented where they are decoded: on Decoder (the
// snapshot file and the manifest) and on GenDecoder (the generation object);
// golden files of every version in testdata and fuzzed decoders keep the
// code to them.
//
// The encoders stream: data is written through a buffer with the checksum
// computed on the fly, and the decoders read into the caller's own slice in
// large chunks, so neither side ever holds a second copy of a multi-GiB
// filter. Damaged input yields errors wrapping ErrCorrupt, ErrNotSnapshot or
// ErrUnknownVersion, never a panic, and no length field is trusted before it
// has been bounded (see the Max* constants).
//
// # Inspection
//
// Inspect prints a human-readable report of a snapshot file — header,
// per-generation fill, estimated keys and false positive rate, covered
// offsets, checksum status — and InspectManifest the same for a manifest,
// reading its generation objects; `kdedup inspect FILE` exposes both.
package snapshot
