// Package snapshot is the file format of kdedup's checkpoints: it encodes,
// decodes and inspects one snapshot of a sliding-window Bloom filter. It
// knows nothing about where snapshots are kept (package checkpoint stores
// them) nor about Bloom filters beyond a Header of metadata and opaque data
// made of little-endian 64-bit words: the dedup package maps the filter's
// snapshot metadata to a Header and streams the words through Encode; on
// restore it validates the Header and reads the words back through a Decoder.
//
// # Format
//
// A snapshot is a versioned binary file: magic "KDDPSNAP", a uint16 format
// version (Encode writes CurrentVersion, version 5: the generation-
// interleaved layout, sector 0 of a block stored word-major, with use-tagged
// words and grown stages; the decoder reads every version from MinVersion
// on: versions 1 to 4 hold the data in the layout of an older kdedup's
// filter and only decode for inspection), a length-prefixed header body with
// the filter parameters, the generation table, the slot use table, the stage
// table, the epoch, the scope, the input and output offsets the snapshot
// covers and its creation time, a CRC32C of everything so far (so a header
// can be validated without reading the data), the word count and words, and
// a final CRC32C of the whole file. The exact byte layout, the format's one
// specification, is documented on Decoder, where it is decoded; golden files
// of every version in testdata and fuzzed decoders keep the code to it.
//
// Encode streams: the data is written through a buffer with the checksum
// computed on the fly, and Decoder.ReadWords reads into the caller's own
// slice in large chunks, so neither side ever holds a second copy of a
// multi-GiB filter. Damaged input yields errors wrapping ErrCorrupt,
// ErrNotSnapshot or ErrUnknownVersion, never a panic, and no length field is
// trusted before it has been bounded (see the Max* constants).
//
// # Inspection
//
// Inspect prints a human-readable report of a snapshot file — header,
// per-generation fill, estimated keys and false positive rate, covered
// offsets, checksum status — and is exposed as `kdedup inspect FILE`.
package snapshot
