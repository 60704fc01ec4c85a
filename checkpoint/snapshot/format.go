package snapshot

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
	"slices"
	"time"
)

// Magic is the 8-byte signature every snapshot file starts with.
const Magic = "KDDPSNAP"

// Format versions. EncodeManifest and NewGenEncoder write CurrentVersion;
// the decoder reads every version from MinVersion to CurrentVersion (see
// knownVersion).
const (
	// VersionV1 is the first layout: it has no output-offset table.
	VersionV1 uint16 = 1
	// VersionV2 adds the output-offset table at the end of the header body.
	VersionV2 uint16 = 2
	// VersionV3 is the sectorized layout without a spare slot: it adds the
	// sector count and the slot use table, and the top bit of every data
	// word is a use tag (see Decoder). A v1 or v2 file decodes (for
	// inspection), but its data is in the layout of an older kdedup, which
	// this build's filter cannot restore.
	VersionV3 uint16 = 3
	// VersionV4 adds grown stages: the fill-counter shard bits, the stage-0
	// fill table and the stage table at the end of the header body, and the
	// stages' words after the slots' words (see Decoder).
	VersionV4 uint16 = 4
	// VersionV5 is the interleaved layout: sector 0 of every block is stored
	// word-major (word w of every slot side by side) and a key sets its
	// first bits in one word of it. It adds the first-word bits to the
	// header and to every stage entry. A v3 or v4 file decodes, but its data
	// is in the layout of an older kdedup, which this build's filter cannot
	// restore.
	VersionV5 uint16 = 5
	// VersionV6 is the incremental format: a snapshot file is a manifest whose data lives in
	// generation objects (see GenDecoder), one per live generation, that later manifests reference
	// again while the generation does not change. Its header is version 5's followed by the
	// generation references.
	VersionV6 uint16 = 6
	// VersionV7 is version 6 with two additions at the end of the header
	// body: the manifest's owner epoch, the fencing token of the replica that
	// owned the unit when it saved (see Header.OwnerEpoch), then the identity
	// section: the key spec (DEDUP_KEY, as identity.Spec.String spells it)
	// whose identities the filter holds, so that a filter is never restored
	// under another identity. In place of the hash seed it stores the
	// seed's fingerprint (SeedPrintOf), never the seed. Its generation
	// objects are version 6's.
	VersionV7 uint16 = 7
	// CurrentVersion is the newest version: the version of the manifests
	// EncodeManifest writes. The generation objects they reference are
	// version 6 (GenObjectVersion).
	CurrentVersion = VersionV7
	// GenObjectVersion is the version of the generation objects a manifest
	// references.
	GenObjectVersion = VersionV6
	// MinVersion is the oldest version the decoder accepts.
	MinVersion = VersionV1
)

// knownVersion reports whether this build reads version v.
func knownVersion(v uint16) bool {
	return v >= MinVersion && v <= CurrentVersion
}

// Scope values for Header.Scope.
const (
	// ScopePartition marks a filter that serves one input partition; its
	// Header.Partition is that partition (>= 0).
	ScopePartition = "partition"
	// ScopeGlobal marks a filter shared by every partition of the topic; its
	// Header.Partition is -1.
	ScopeGlobal = "global"
)

// Bounds applied to every header, on encode and on decode. They keep a
// corrupt or hostile length field from turning into an absurd allocation or
// an endless read.
const (
	// MaxHeaderBytes bounds the header body length.
	MaxHeaderBytes = 16 << 20
	// MaxDataBytes bounds the bit data (words × 8).
	MaxDataBytes = 1 << 40
	// MaxGenerations bounds Header.Generations.
	MaxGenerations = 1 << 12
	// MaxSlots bounds Header.Slots.
	MaxSlots = 1 << 13
	// MaxK bounds Header.K.
	MaxK = 255
	// MaxSectorBits bounds Header.SectorBits.
	MaxSectorBits = 1 << 16
	// MaxSectors bounds Header.Sectors.
	MaxSectors = 64
	// MaxTopicLen bounds the length of Header.Topic in bytes.
	MaxTopicLen = 255
	// MaxOffsets bounds the number of entries in each offset table.
	MaxOffsets = 1 << 20
	// MaxShardBits bounds Header.ShardBits.
	MaxShardBits = 16
	// MaxStages bounds the number of entries of the stage table.
	MaxStages = 1 << 12
	// MaxObjectName bounds the length of a generation object's name in a manifest.
	MaxObjectName = 1024
	// MaxKeySpecLen bounds the length of Header.KeySpec in bytes.
	MaxKeySpecLen = 4096
	// MinGenObjectSize is the size of the smallest generation object: a header with one section
	// and a run of empty chunks.
	MinGenObjectSize = preambleLen + 12 + 8 + 4 + 2 + 4
)

// Sentinel errors. Every error returned by the decoder for a damaged,
// truncated or foreign file wraps exactly one of the first three, so callers
// can classify failures with errors.Is.
var (
	// ErrCorrupt reports a checksum mismatch, a truncated file, trailing
	// bytes, or a length/parameter that cannot be right.
	ErrCorrupt = errors.New("snapshot: snapshot corrupt")
	// ErrNotSnapshot reports a file that does not start with Magic.
	ErrNotSnapshot = errors.New("snapshot: not a snapshot file")
	// ErrUnknownVersion reports a snapshot whose format version this build
	// cannot read (typically written by a newer kdedup).
	ErrUnknownVersion = errors.New("snapshot: unknown snapshot format version")
	// ErrInvalidHeader is returned by the encoders for a Header that violates the
	// format's constraints; nothing usable has been written in that case.
	ErrInvalidHeader = errors.New("snapshot: invalid header")
)

// castagnoli is the CRC32C table; on amd64 and arm64 crc32 uses the CPU's
// CRC32 instructions for it.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// preambleLen is magic + version + header body length.
const preambleLen = 8 + 2 + 4

// fixedBodyLen is the size of the fixed-width part of the header body.
const fixedBodyLen = 4 + 8 + 8 + 8 + 8 + 4 + 4 + 8 + 4 + 8 + 8 + 8 + 8 + 8

// genEntryLen is the size of one generation table entry.
const genEntryLen = 8 + 8 + 4

// Generation describes one live generation of the sliding window.
type Generation struct {
	// Number is the generation's number (its epoch): generation numbers
	// count intervals since Header.Origin.
	Number uint64
	// Start is when the generation began receiving inserts. The zero Time
	// is stored as 0 and decodes back to the zero Time.
	Start time.Time
	// Slot is the slot index (0 <= Slot < Header.Slots) whose blocks hold
	// this generation's bits.
	Slot int
}

// Stage describes one grown stage of a live generation (version 4): a
// blocked Bloom filter of Groups blocks of Sectors sectors of SectorBits bits,
// without use tags, whose Words words follow the slots' words in the data,
// in the order of the stage table.
type Stage struct {
	// Generation is the number of the generation the stage extends; it
	// must be in the generation table.
	Generation uint64
	// Index is the stage's number in its generation, from 1.
	Index int
	// Groups, K, FirstBits and Sectors are the stage's layout (FirstBits:
	// version 5, 0 before).
	Groups    uint64
	K         int
	FirstBits int
	Sectors   int
	// Words is Groups × Sectors × SectorBits/64.
	Words uint64
	// Counts holds the keys offered to each of the 2^ShardBits shards.
	Counts []uint64
}

// Header is the metadata of a snapshot: everything except the bit data.
// The zero value is not a valid header; see the package documentation for
// the constraints EncodeManifest enforces.
type Header struct {
	// Version is the format version the snapshot was read from. Decoder.Header sets
	// it; EncodeManifest ignores it and writes CurrentVersion.
	Version uint16

	// Generations is the number of generations N in the window.
	Generations int
	// Interval is the length of one generation.
	Interval time.Duration
	// Capacity is the expected number of distinct keys per interval.
	Capacity uint64
	// FalsePositiveRate is the configured target FPR over the whole window.
	FalsePositiveRate float64
	// Seed is the hash seed; a restorer must hash with the same seed. Up to
	// version 6 the header stores it, and Decoder.Header sets it; from version 7 on
	// the header stores only SeedPrint, and Seed decodes as 0 (see
	// SeedMatches). EncodeManifest takes it from here.
	Seed uint64
	// SeedPrint is the fingerprint of the hash seed (SeedPrintOf), which
	// version 7 stores in place of the seed so that a store reader never
	// learns the secret. Decoder.Header sets it from version 7 on (0 before). An
	// encoder writes it when it is not 0, SeedPrintOf(Seed) otherwise.
	SeedPrint uint64
	// K is the number of bits a key sets in one generation (over all of
	// its block's sectors).
	K int
	// FirstBits is how many of them go to one word of the block's sector 0
	// (version 5, 1..K; 0 before, when the K bits spread over all sectors).
	FirstBits int
	// SectorBits is the size of one sector in bits (a multiple of 64): a
	// generation's block in a group is Sectors sectors of SectorBits bits.
	SectorBits int
	// Sectors is the number of sectors of a generation's block. Version 1
	// and 2 snapshots have one and decode with 1.
	Sectors int
	// Groups is the number of block groups.
	Groups uint64
	// Slots is the number of slots per group (>= Generations).
	Slots int
	// SlotUses holds, per slot, the use of the slot: how many generations
	// it held before its current one. The top bit of a data word is the
	// parity of the use that last wrote it. Version 3 and later (exactly Slots
	// entries); nil for older versions.
	SlotUses []uint64
	// Words is the number of 64-bit data words; it must equal
	// Groups × Slots × Sectors × SectorBits/64 (SlotWords), plus the words of
	// every grown stage (version 4).
	Words uint64
	// ShardBits is how many top bits of a key's hash select its fill
	// counter (version 4; 0 before).
	ShardBits int
	// Fill holds the keys offered to each slot's first stage per shard:
	// Slots × 2^ShardBits entries, slot-major (version 4; nil before, or
	// when unknown).
	Fill []uint64
	// Stages is the stage table (version 4): the grown stages of the live
	// generations, whose words follow the slots' words in this order.
	Stages []Stage
	// Refs makes the snapshot a manifest (version 6): one reference per entry
	// of Gens, in the same order, to the generation object holding that
	// generation's words (stage 0's, then its stages' in the order of the
	// stage table). A manifest holds no data itself; Words still counts the
	// words of the state it describes. Nil before version 6.
	Refs []GenRef
	// OwnerEpoch is the owner epoch of the replica that saved the manifest
	// (version 7; 0 before): a fencing token that increases with every change
	// of the unit's owner, so that a save by a replica that lost the unit
	// (a zombie) can be told from its successor's (see checkpoint.Store).
	OwnerEpoch uint64
	// KeySpec is the identity section (version 7): the key spec (DEDUP_KEY,
	// as identity.Spec.String spells it) the filter's identities were
	// extracted with, at most MaxKeySpecLen bytes. Empty before version 7,
	// where it is unknown (see KeySpecKnown), and when the writer did not
	// say.
	KeySpec string

	// Signature is the HMAC-SHA256 of a signed manifest (version 7's
	// signature section), nil when unsigned. Decoder.Header sets it; see
	// EncodeSignedManifest and VerifySignature.
	Signature []byte
	// signed holds the bytes Signature covers (decoded manifests only).
	signed []byte
	// key is the signing key of EncodeSignedManifest, nil when unsigned.
	key []byte

	// Origin is the start of generation number 0. The zero Time is stored
	// as 0.
	Origin time.Time
	// Epoch is the number of the current (newest) generation.
	Epoch uint64
	// Rotations is the filter's rotation count at snapshot time.
	Rotations uint64
	// Gens is the generation table: the live generations, newest first
	// (strictly decreasing Number, none above Epoch), at most Generations
	// of them, in distinct slots. Slots not listed are free.
	Gens []Generation

	// Scope is ScopePartition or ScopeGlobal.
	Scope string
	// Topic is the input topic the filter serves (may be empty).
	Topic string
	// Partition is the input partition for ScopePartition, -1 for
	// ScopeGlobal.
	Partition int32

	// InputOffsets maps each input partition covered by the snapshot to
	// the next offset to consume.
	InputOffsets map[int32]int64
	// OutputOffsets maps each output partition to its high-water offset at
	// snapshot time; the crash-consistency re-warm reads the output topic
	// from there. Version 1 snapshots decode with a nil map.
	OutputOffsets map[int32]int64

	// Created is when the snapshot was taken. The zero Time is stored as 0.
	Created time.Time
}

// GenRef is a manifest's reference to the generation object that holds one
// live generation (version 6; see GenDecoder).
type GenRef struct {
	// Object is the object's name in the store.
	Object string
	// Size is the object's length in bytes.
	Size int64
	// Checksum is the object's trailing checksum (GenEncoder.Checksum), which
	// ties the reference to the object's content.
	Checksum uint32
	// SHA256 is the SHA-256 of the object's bytes in a signed manifest
	// (version 7's signature section), all zero otherwise. The manifest's
	// HMAC covers it, so it authenticates the object.
	SHA256 [sha256.Size]byte
}

// Manifest reports whether the snapshot is a manifest: version 6, whose
// generations live in generation objects (see Refs).
func (h *Header) Manifest() bool { return h.Version >= VersionV6 }

// KeySpecKnown reports whether the snapshot records the key spec its
// identities were extracted with (version 7 and later): an older snapshot
// does not say, and its KeySpec is empty.
func (h *Header) KeySpecKnown() bool { return h.Version >= VersionV7 }

// DataBytes returns the size in bytes of the bit data the file itself holds:
// Words × 8, or 0 for a manifest.
func (h *Header) DataBytes() uint64 {
	if h.Manifest() {
		return 0
	}
	return h.Words * 8
}

// StageWords returns the number of data words of the grown stages: the
// data's last StageWords words.
func (h *Header) StageWords() uint64 {
	var n uint64
	for _, st := range h.Stages {
		n += st.Words
	}
	return n
}

// SlotWords returns the number of data words of the slots: the data's first
// Words - StageWords words.
func (h *Header) SlotWords() uint64 { return h.Words - h.StageWords() }

// BitsPerGeneration returns the number of bits one generation owns
// (Groups × Sectors × SectorBits), tag bits included.
func (h *Header) BitsPerGeneration() uint64 {
	return h.Groups * uint64(h.Sectors) * uint64(h.SectorBits)
}

// Tagged reports whether the top bit of every data word is a use tag
// rather than data (version 3 and later).
func (h *Header) Tagged() bool { return h.Version >= VersionV3 }

// timeNS encodes t as unix nanoseconds, mapping the zero Time to 0.
func timeNS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// nsTime decodes unix nanoseconds, mapping 0 to the zero Time. Decoded times
// are in UTC.
func nsTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// representable reports whether t survives the unix-nanosecond encoding.
func representable(t time.Time) bool {
	if t.IsZero() {
		return true
	}
	ns := t.UnixNano()
	return ns != 0 && time.Unix(0, ns).Equal(t)
}

// check validates h against the constraints of the given format version.
// The returned error carries no sentinel; callers wrap it with
// ErrInvalidHeader or ErrCorrupt.
func (h *Header) check(version uint16) error {
	switch {
	case h.Generations < 1 || h.Generations > MaxGenerations:
		return fmt.Errorf("generations %d out of range [1,%d]", h.Generations, MaxGenerations)
	case h.Interval <= 0:
		return fmt.Errorf("interval %v must be positive", h.Interval)
	case h.Capacity == 0:
		return errors.New("capacity must be positive")
	case !(h.FalsePositiveRate > 0 && h.FalsePositiveRate < 1):
		return fmt.Errorf("false positive rate %v out of range (0,1)", h.FalsePositiveRate)
	case h.K < 1 || h.K > MaxK:
		return fmt.Errorf("k %d out of range [1,%d]", h.K, MaxK)
	case h.SectorBits < 64 || h.SectorBits > MaxSectorBits || h.SectorBits%64 != 0:
		return fmt.Errorf("block bits %d must be a multiple of 64 in [64,%d]", h.SectorBits, MaxSectorBits)
	case h.Sectors < 1 || h.Sectors > MaxSectors:
		return fmt.Errorf("sectors %d out of range [1,%d]", h.Sectors, MaxSectors)
	case version < VersionV3 && h.Sectors != 1:
		return fmt.Errorf("format version %d has one sector per block, not %d", version, h.Sectors)
	case h.Groups == 0:
		return errors.New("groups must be positive")
	case h.Slots < h.Generations || h.Slots > MaxSlots:
		return fmt.Errorf("slots %d out of range [generations=%d,%d]", h.Slots, h.Generations, MaxSlots)
	case version >= VersionV3 && len(h.SlotUses) != h.Slots:
		return fmt.Errorf("slot use table has %d entries for %d slots", len(h.SlotUses), h.Slots)
	case version >= VersionV5 && (h.FirstBits < 1 || h.FirstBits > h.K || h.Sectors == 1 && h.FirstBits != h.K):
		return fmt.Errorf("first-word bits %d out of range [1,k=%d] (k with one sector)", h.FirstBits, h.K)
	}
	if err := h.checkRefs(version); err != nil {
		return err
	}
	switch {
	case version < VersionV7 && h.KeySpec != "":
		return fmt.Errorf("format version %d has no key spec", version)
	case h.Signature != nil && (version < VersionV7 || len(h.Signature) != sha256.Size):
		return fmt.Errorf("signature of %d bytes in format version %d (only version 7 holds one, of %d bytes)", len(h.Signature), version, sha256.Size)
	case h.SeedPrint != 0 && h.Seed != 0 && h.SeedPrint != SeedPrintOf(h.Seed):
		return errors.New("seed fingerprint is not the fingerprint of the seed")
	case len(h.KeySpec) > MaxKeySpecLen:
		return fmt.Errorf("key spec of %d bytes exceeds %d", len(h.KeySpec), MaxKeySpecLen)
	}
	return h.checkSizes(version)
}

// checkRefs checks the generation references of a manifest.
func (h *Header) checkRefs(version uint16) error {
	if version < VersionV6 {
		if h.Refs != nil {
			return fmt.Errorf("format version %d has no generation references", version)
		}
		return nil
	}
	if len(h.Refs) != len(h.Gens) {
		return fmt.Errorf("%d generation references for %d generations", len(h.Refs), len(h.Gens))
	}
	for i, r := range h.Refs {
		if err := checkObjectName(r.Object); err != nil {
			return fmt.Errorf("generation reference %d: %w", i, err)
		}
		if r.Size < MinGenObjectSize || uint64(r.Size) > MaxDataBytes*2 {
			return fmt.Errorf("generation reference %d: object size %d out of range", i, r.Size)
		}
	}
	return nil
}

// checkObjectName checks a referenced object's name: 1 to MaxObjectName
// bytes of ASCII letters, digits, '.', '_', '-' and '/'.
func checkObjectName(name string) error {
	if name == "" || len(name) > MaxObjectName {
		return fmt.Errorf("object name of %d bytes", len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/') {
			return fmt.Errorf("object name %q contains %q", name, c)
		}
	}
	return nil
}

// checkSizes checks the data size and the generation table.
func (h *Header) checkSizes(version uint16) error {
	hi, perGroup := bits.Mul64(uint64(h.Slots)*uint64(h.Sectors), uint64(h.SectorBits/64))
	if hi != 0 {
		return errors.New("words overflow")
	}
	hi, words := bits.Mul64(h.Groups, perGroup)
	if hi != 0 || words > MaxDataBytes/8 {
		return fmt.Errorf("groups %d × slots %d × sectors %d × block bits %d exceeds %d data bytes", h.Groups, h.Slots, h.Sectors, h.SectorBits, uint64(MaxDataBytes))
	}
	stageWords, err := h.checkStages(version)
	if err != nil {
		return err
	}
	if h.Words-stageWords != words || h.Words < stageWords {
		return fmt.Errorf("words %d, want groups × slots × sectors × blockBits/64 = %d plus %d stage words", h.Words, words, stageWords)
	}
	if err := h.checkGens(); err != nil {
		return err
	}
	return h.checkScope()
}

// checkStages checks the fill and stage tables and returns the stages'
// words.
func (h *Header) checkStages(version uint16) (uint64, error) {
	if version < VersionV4 {
		if h.ShardBits != 0 || h.Fill != nil || h.Stages != nil {
			return 0, fmt.Errorf("format version %d has no stages", version)
		}
		return 0, nil
	}
	if h.ShardBits < 0 || h.ShardBits > MaxShardBits {
		return 0, fmt.Errorf("shard bits %d out of range [0,%d]", h.ShardBits, MaxShardBits)
	}
	if len(h.Fill) != 0 && len(h.Fill) != h.Slots<<h.ShardBits {
		return 0, fmt.Errorf("fill table has %d entries, want 0 or slots × 2^shardBits = %d", len(h.Fill), h.Slots<<h.ShardBits)
	}
	if len(h.Stages) > MaxStages {
		return 0, fmt.Errorf("%d stages, max %d", len(h.Stages), MaxStages)
	}
	var total uint64
	for i, st := range h.Stages {
		if !slices.ContainsFunc(h.Gens, func(g Generation) bool { return g.Number == st.Generation }) {
			return 0, fmt.Errorf("stage %d: generation %d is not in the generation table", i, st.Generation)
		}
		hi, words := bits.Mul64(st.Groups, uint64(st.Sectors)*uint64(h.SectorBits/64))
		switch {
		case st.Index < 1 || st.Index > 64 || st.K < 1 || st.K > MaxK || st.Sectors < 1 || st.Sectors > MaxSectors || st.Groups == 0:
			return 0, fmt.Errorf("stage %d: index %d, k %d, sectors %d, groups %d out of range", i, st.Index, st.K, st.Sectors, st.Groups)
		case version >= VersionV5 && (st.FirstBits < 1 || st.FirstBits > st.K || st.Sectors == 1 && st.FirstBits != st.K):
			return 0, fmt.Errorf("stage %d: first-word bits %d out of range [1,k=%d] (k with one sector)", i, st.FirstBits, st.K)
		case hi != 0 || words != st.Words || words > MaxDataBytes/8:
			return 0, fmt.Errorf("stage %d: words %d, want groups × sectors × blockBits/64", i, st.Words)
		case len(st.Counts) != 1<<h.ShardBits:
			return 0, fmt.Errorf("stage %d: %d counts for %d shards", i, len(st.Counts), 1<<h.ShardBits)
		}
		total += words
		if total > MaxDataBytes/8 {
			return 0, fmt.Errorf("stages exceed %d data bytes", uint64(MaxDataBytes))
		}
	}
	return total, nil
}

// checkGens checks the generation table and the origin.
func (h *Header) checkGens() error {
	if len(h.Gens) > h.Generations {
		return fmt.Errorf("generation table has %d entries, more than the %d generations", len(h.Gens), h.Generations)
	}
	if !representable(h.Origin) {
		return fmt.Errorf("origin %v not representable as unix nanoseconds", h.Origin)
	}
	used := make(map[int]bool, len(h.Gens))
	for i, g := range h.Gens {
		if g.Number > h.Epoch {
			return fmt.Errorf("generation %d: number %d above the epoch %d", i, g.Number, h.Epoch)
		}
		if i > 0 && g.Number >= h.Gens[i-1].Number {
			return fmt.Errorf("generation %d: number %d not below the previous %d (table must be newest first)", i, g.Number, h.Gens[i-1].Number)
		}
		if g.Slot < 0 || g.Slot >= h.Slots {
			return fmt.Errorf("generation %d: slot %d out of range [0,%d)", i, g.Slot, h.Slots)
		}
		if used[g.Slot] {
			return fmt.Errorf("generation %d: slot %d used twice", i, g.Slot)
		}
		used[g.Slot] = true
		if !representable(g.Start) {
			return fmt.Errorf("generation %d: start %v not representable as unix nanoseconds", i, g.Start)
		}
	}
	return nil
}

// checkScope checks the scope, topic, offsets and creation time.
func (h *Header) checkScope() error {
	switch h.Scope {
	case ScopePartition:
		if h.Partition < 0 {
			return fmt.Errorf("scope %q needs partition >= 0, got %d", h.Scope, h.Partition)
		}
	case ScopeGlobal:
		if h.Partition != -1 {
			return fmt.Errorf("scope %q needs partition -1, got %d", h.Scope, h.Partition)
		}
	default:
		return fmt.Errorf("unknown scope %q", h.Scope)
	}
	if len(h.Topic) > MaxTopicLen {
		return fmt.Errorf("topic is %d bytes, max %d", len(h.Topic), MaxTopicLen)
	}
	if err := checkOffsets("input", h.InputOffsets); err != nil {
		return err
	}
	if err := checkOffsets("output", h.OutputOffsets); err != nil {
		return err
	}
	if !representable(h.Created) {
		return fmt.Errorf("created %v not representable as unix nanoseconds", h.Created)
	}
	return nil
}

func checkOffsets(what string, m map[int32]int64) error {
	if len(m) > MaxOffsets {
		return fmt.Errorf("%d %s offsets, max %d", len(m), what, MaxOffsets)
	}
	for p, o := range m {
		if p < 0 || o < 0 {
			return fmt.Errorf("%s offset %d:%d must not be negative", what, p, o)
		}
	}
	return nil
}

// MinSigningKey is the shortest signing key EncodeSignedManifest and VerifySignature accept, in
// bytes: the output size of SHA-256, as RFC 2104 recommends for an HMAC key.
const MinSigningKey = 32

// ErrUnsigned is returned (wrapped) by VerifySignature for a snapshot that carries no signature:
// a version 7 manifest written without a key, or any older snapshot, which cannot be signed.
var ErrUnsigned = errors.New("snapshot: not signed")

// ErrBadSignature is returned (wrapped) by VerifySignature for a manifest whose HMAC does not
// match the key, and by readers of a generation object whose SHA-256 differs from the one the
// signed manifest records.
var ErrBadSignature = errors.New("snapshot: signature does not match")

// VerifySignature checks the HMAC-SHA256 of a decoded signed manifest with key. It returns nil
// when it matches, an error wrapping ErrUnsigned for an unsigned snapshot, and one wrapping
// ErrBadSignature otherwise. A nil return authenticates the header, including the SHA-256 of
// every generation reference; the caller checks the objects against those.
func (h *Header) VerifySignature(key []byte) error {
	if h.Signature == nil || h.signed == nil {
		return fmt.Errorf("%w (format version %d)", ErrUnsigned, h.Version)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write(h.signed)
	if !hmac.Equal(mac.Sum(nil), h.Signature) {
		return fmt.Errorf("%w: the manifest's HMAC was not made with the configured key", ErrBadSignature)
	}
	return nil
}

// SeedPrintOf returns the fingerprint of a hash seed: the first 8 bytes of SHA-256 over a domain
// string and the seed (little-endian), read as a big-endian uint64. It tells two seeds apart (a
// snapshot written with another seed) without revealing the seed, which is a secret: whoever
// knows it can craft identities that collide in the filter. Version 7 headers store it instead of
// the seed.
func SeedPrintOf(seed uint64) uint64 {
	b := binary.LittleEndian.AppendUint64([]byte("kdedup hash seed\x00"), seed)
	sum := sha256.Sum256(b)
	return binary.BigEndian.Uint64(sum[:8])
}

// SeedFingerprint returns SeedPrintOf(seed) in hex (16 digits), as Inspect and the logs print it.
func SeedFingerprint(seed uint64) string {
	return fmtSeedPrint(SeedPrintOf(seed))
}

func fmtSeedPrint(p uint64) string {
	return hex.EncodeToString(binary.BigEndian.AppendUint64(nil, p))
}

// StoredSeedPrint returns the fingerprint of the seed the snapshot was written with: SeedPrint
// from version 7 on, SeedPrintOf(Seed) before.
func (h *Header) StoredSeedPrint() uint64 {
	if h.Version >= VersionV7 {
		return h.SeedPrint
	}
	return SeedPrintOf(h.Seed)
}

// SeedFingerprint returns StoredSeedPrint in hex, as SeedFingerprint spells a seed's.
func (h *Header) SeedFingerprint() string {
	return fmtSeedPrint(h.StoredSeedPrint())
}

// SeedMatches reports whether the snapshot was written with the hash seed seed: by its
// fingerprint from version 7 on, by the stored seed before.
func (h *Header) SeedMatches(seed uint64) bool {
	if h.Version >= VersionV7 {
		return h.SeedPrint == SeedPrintOf(seed)
	}
	return h.Seed == seed
}

// seedField is the 8 bytes at body offset 28 that version writes: the seed up to version 6,
// its fingerprint from version 7 on.
func (h *Header) seedField(version uint16) uint64 {
	switch {
	case version < VersionV7:
		return h.Seed
	case h.SeedPrint != 0:
		return h.SeedPrint
	default:
		return SeedPrintOf(h.Seed)
	}
}
