package snapshot

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
)

// appendBody appends the header body of the given version to b.
func appendBody(b []byte, h *Header, version uint16) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, uint32(h.Generations))
	b = le.AppendUint64(b, uint64(h.Interval))
	b = le.AppendUint64(b, h.Capacity)
	b = le.AppendUint64(b, math.Float64bits(h.FalsePositiveRate))
	b = le.AppendUint64(b, h.seedField(version))
	b = le.AppendUint32(b, uint32(h.K))
	b = le.AppendUint32(b, uint32(h.SectorBits))
	b = le.AppendUint64(b, h.Groups)
	b = le.AppendUint32(b, uint32(h.Slots))
	b = le.AppendUint64(b, h.Words)
	b = le.AppendUint64(b, uint64(timeNS(h.Origin)))
	b = le.AppendUint64(b, h.Epoch)
	b = le.AppendUint64(b, h.Rotations)
	b = le.AppendUint64(b, uint64(timeNS(h.Created)))
	b = le.AppendUint16(b, uint16(len(h.Scope)))
	b = append(b, h.Scope...)
	b = le.AppendUint16(b, uint16(len(h.Topic)))
	b = append(b, h.Topic...)
	b = le.AppendUint32(b, uint32(h.Partition))
	b = le.AppendUint32(b, uint32(len(h.Gens)))
	for _, g := range h.Gens {
		b = le.AppendUint64(b, g.Number)
		b = le.AppendUint64(b, uint64(timeNS(g.Start)))
		b = le.AppendUint32(b, uint32(g.Slot))
	}
	b = appendOffsets(b, h.InputOffsets)
	if version >= VersionV2 {
		b = appendOffsets(b, h.OutputOffsets)
	}
	if version >= VersionV3 {
		b = le.AppendUint32(b, uint32(h.Sectors))
		for _, u := range h.SlotUses {
			b = le.AppendUint64(b, u)
		}
	}
	if version >= VersionV4 {
		b = appendStages(b, h, version)
	}
	if version >= VersionV5 {
		b = le.AppendUint32(b, uint32(h.FirstBits))
	}
	if version >= VersionV6 {
		b = appendRefs(b, h.Refs)
	}
	if version >= VersionV7 { // the owner epoch, then the identity section
		b = le.AppendUint64(b, h.OwnerEpoch)
		b = le.AppendUint16(b, uint16(len(h.KeySpec)))
		b = append(b, h.KeySpec...)
		b = appendSignature(b, h)
	}
	return b
}

// appendSignature appends the version 7 signature section: 0 for an unsigned manifest, else 1,
// the SHA-256 of every referenced object, and the HMAC: room for it, which encode fills in, when
// signing, or the decoded header's Signature as it is, so that a decoded manifest re-encodes to
// the same bytes.
func appendSignature(b []byte, h *Header) []byte {
	if h.key == nil && h.Signature == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	for _, r := range h.Refs {
		b = append(b, r.SHA256[:]...)
	}
	if h.key == nil {
		return append(b, h.Signature...)
	}
	return append(b, make([]byte, sha256.Size)...)
}

// appendRefs appends the version 6 generation references.
func appendRefs(b []byte, refs []GenRef) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, uint32(len(refs)))
	for _, r := range refs {
		b = le.AppendUint16(b, uint16(len(r.Object)))
		b = append(b, r.Object...)
		b = le.AppendUint64(b, uint64(r.Size))
		b = le.AppendUint32(b, r.Checksum)
	}
	return b
}

// appendStages appends the version 4 tables: shard bits, fill, stages (with
// their first-word bits in version 5).
func appendStages(b []byte, h *Header, version uint16) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, uint32(h.ShardBits))
	b = le.AppendUint32(b, uint32(len(h.Fill)))
	for _, c := range h.Fill {
		b = le.AppendUint64(b, c)
	}
	b = le.AppendUint32(b, uint32(len(h.Stages)))
	for _, st := range h.Stages {
		b = le.AppendUint64(b, st.Generation)
		b = le.AppendUint32(b, uint32(st.Index))
		b = le.AppendUint64(b, st.Groups)
		b = le.AppendUint32(b, uint32(st.K))
		if version >= VersionV5 {
			b = le.AppendUint32(b, uint32(st.FirstBits))
		}
		b = le.AppendUint32(b, uint32(st.Sectors))
		b = le.AppendUint64(b, st.Words)
		for _, c := range st.Counts {
			b = le.AppendUint64(b, c)
		}
	}
	return b
}

// appendOffsets appends an offset table sorted by partition, so equal
// headers always encode to equal bytes.
func appendOffsets(b []byte, m map[int32]int64) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, uint32(len(m)))
	keys := make([]int32, 0, len(m))
	for p := range m {
		keys = append(keys, p)
	}
	slices.Sort(keys)
	for _, p := range keys {
		b = le.AppendUint32(b, uint32(p))
		b = le.AppendUint64(b, uint64(m[p]))
	}
	return b
}

// EncodeManifest writes a manifest (CurrentVersion, version 7) to w: the header h, whose Refs
// name the generation objects holding the data, and the checksum; a manifest
// holds no data itself. It fails, wrapping ErrInvalidHeader, for a header
// without a reference per generation, and returns the error from w.
func EncodeManifest(w io.Writer, h Header) error {
	return encode(w, &h, CurrentVersion, func(io.Writer) error { return nil })
}

// EncodeSignedManifest writes a manifest as EncodeManifest does, signed with key: its signature
// section holds the SHA-256 of every referenced generation object (GenRef.SHA256, which the caller
// sets) and an HMAC-SHA256 with key over every byte of the file before the HMAC, so that a reader
// holding the key can tell that the manifest, and through the SHA-256 sums the objects it
// references, were written by a holder of the key (Header.VerifySignature). It fails, wrapping
// ErrInvalidHeader, for a key shorter than MinSigningKey bytes or a reference without a SHA-256.
func EncodeSignedManifest(w io.Writer, h Header, key []byte) error {
	if len(key) < MinSigningKey {
		return fmt.Errorf("%w: signing key of %d bytes, at least %d", ErrInvalidHeader, len(key), MinSigningKey)
	}
	for _, r := range h.Refs {
		if r.SHA256 == ([sha256.Size]byte{}) {
			return fmt.Errorf("%w: reference to %s has no SHA-256", ErrInvalidHeader, r.Object)
		}
	}
	h.key = key
	return EncodeManifest(w, h)
}

// encode writes h in the given version. Only tests write old versions.
func encode(w io.Writer, h *Header, version uint16, data func(w io.Writer) error) error {
	if err := h.check(version); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidHeader, err)
	}
	if data == nil {
		return fmt.Errorf("%w: nil data function", ErrInvalidHeader)
	}
	head := make([]byte, preambleLen, preambleLen+fixedBodyLen+64+genEntryLen*len(h.Gens)+12*(len(h.InputOffsets)+len(h.OutputOffsets))+8*len(h.SlotUses)+4+8+12+8*len(h.Fill))
	copy(head, Magic)
	binary.LittleEndian.PutUint16(head[8:], version)
	head = appendBody(head, h, version)
	bodyLen := len(head) - preambleLen
	if bodyLen > MaxHeaderBytes {
		return fmt.Errorf("%w: header body is %d bytes, max %d", ErrInvalidHeader, bodyLen, MaxHeaderBytes)
	}
	binary.LittleEndian.PutUint32(head[10:], uint32(bodyLen))
	if h.key != nil && version >= VersionV7 {
		mac := hmac.New(sha256.New, h.key)
		mac.Write(head[:len(head)-sha256.Size])
		mac.Sum(head[:len(head)-sha256.Size])
	}
	head = binary.LittleEndian.AppendUint32(head, crc32.Checksum(head, castagnoli))
	h.Version = version
	head = binary.LittleEndian.AppendUint64(head, h.DataBytes()/8)

	bw := getWriter(w)
	defer putWriter(bw)
	cw := &crcWriter{w: bw}
	if _, err := cw.Write(head); err != nil {
		return fmt.Errorf("snapshot: writing header: %w", err)
	}
	dw := &dataWriter{cw: cw, remaining: h.DataBytes()}
	if err := data(dw); err != nil {
		return fmt.Errorf("snapshot: writing data: %w", err)
	}
	if dw.err != nil {
		return dw.err
	}
	if dw.remaining != 0 {
		return fmt.Errorf("snapshot: data function wrote %d bytes, header declares %d", h.DataBytes()-dw.remaining, h.DataBytes())
	}
	var tail [4]byte
	binary.LittleEndian.PutUint32(tail[:], cw.crc)
	if _, err := bw.Write(tail[:]); err != nil {
		return fmt.Errorf("snapshot: writing checksum: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("snapshot: flushing: %w", err)
	}
	return nil
}

// crcWriter forwards writes and folds them into a running CRC32C.
type crcWriter struct {
	w   io.Writer
	crc uint32
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	return n, err
}

// dataWriter is what encode hands to the data function: it refuses to write
// more than the header declares.
type dataWriter struct {
	cw        *crcWriter
	remaining uint64
	err       error
}

func (d *dataWriter) Write(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	if uint64(len(p)) > d.remaining {
		d.err = fmt.Errorf("snapshot: data function wrote more than the %d bytes the header declares", d.remaining)
		return 0, d.err
	}
	n, err := d.cw.Write(p)
	d.remaining -= uint64(n)
	if err != nil {
		d.err = fmt.Errorf("snapshot: writing data: %w", err)
	}
	return n, err
}
