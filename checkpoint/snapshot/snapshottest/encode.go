package snapshottest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/kdedup/kdedup/checkpoint/snapshot"
)

// castagnoli is the CRC the format uses.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// refName is the object name the manifest Encode derives its header from references; any
// valid name does, since the references are cut off.
const refName = "g"

// Encode writes a single-file snapshot of version 5 (snapshot.VersionV5), which kdedup
// wrote before generation objects and still reads, to w: the header h, then the bit data produced
// by data, then the checksum. data must write exactly h.Words×8 bytes (the words little-endian,
// see WriteWords). It fails for a header that is not valid in version 5 (h.Refs set, for one), and
// returns the errors of data and w; a failed Encode may have written part of a snapshot.
//
// The product no longer writes this version, so its encoder is not exported: Encode derives the
// header from snapshot.EncodeManifest's, whose body begins with the version 5 body (see the
// layout in snapshot.Decoder), save for the seed, which version 7 replaces by its fingerprint.
func Encode(w io.Writer, h snapshot.Header, data func(w io.Writer) error) error {
	if h.Refs != nil || h.KeySpec != "" || h.Signature != nil {
		return fmt.Errorf("snapshottest: %w: a version 5 snapshot has no references, key spec or signature", snapshot.ErrInvalidHeader)
	}
	body, err := bodyV5(h)
	if err != nil {
		return err
	}
	head := make([]byte, 0, 14+len(body)+12)
	head = append(head, snapshot.Magic...)
	head = binary.LittleEndian.AppendUint16(head, snapshot.VersionV5)
	head = binary.LittleEndian.AppendUint32(head, uint32(len(body)))
	head = append(head, body...)
	head = binary.LittleEndian.AppendUint32(head, crc32.Checksum(head, castagnoli))
	head = binary.LittleEndian.AppendUint64(head, h.Words)

	bw := bufio.NewWriterSize(w, 64<<10)
	cw := &countCRC{w: bw, limit: int64(len(head)) + int64(h.Words)*8}
	if _, err := cw.Write(head); err != nil {
		return err
	}
	if err := data(cw); err != nil {
		return fmt.Errorf("snapshottest: writing data: %w", err)
	}
	if cw.n != cw.limit {
		return fmt.Errorf("snapshottest: data function wrote %d bytes, header declares %d", cw.n-int64(len(head)), h.Words*8)
	}
	if _, err := bw.Write(binary.LittleEndian.AppendUint32(nil, cw.crc)); err != nil {
		return err
	}
	return bw.Flush()
}

// bodyV5 returns the version 5 header body of h: the version 7 manifest body that
// snapshot.EncodeManifest writes for h with a reference per generation, cut after the first-word
// bits and with the seed in place of its fingerprint.
func bodyV5(h snapshot.Header) ([]byte, error) {
	h.Refs = make([]snapshot.GenRef, len(h.Gens))
	for i := range h.Refs {
		h.Refs[i] = snapshot.GenRef{Object: refName, Size: snapshot.MinGenObjectSize}
	}
	var m bytes.Buffer
	if err := snapshot.EncodeManifest(&m, h); err != nil {
		return nil, err
	}
	b := m.Bytes()
	if len(b) < 14 {
		return nil, errors.New("snapshottest: manifest too short")
	}
	n := int(binary.LittleEndian.Uint32(b[10:14]))
	// cut: the references (count, then name length, name, size, checksum each), the owner epoch,
	// the key spec (length, bytes) and the signature flag of an unsigned manifest
	tail := 4 + len(h.Refs)*(2+len(refName)+8+4) + 8 + 2 + len(h.KeySpec) + 1
	if n < tail+36 || len(b) < 14+n {
		return nil, errors.New("snapshottest: manifest header shorter than its version 7 fields")
	}
	body := bytes.Clone(b[14 : 14+n-tail])
	binary.LittleEndian.PutUint64(body[28:], h.Seed) // version 7 stores the seed's fingerprint there
	return body, nil
}

// countCRC forwards writes to w while it computes their CRC32C and counts them, and refuses to
// write past limit bytes.
type countCRC struct {
	w        io.Writer
	crc      uint32
	n, limit int64
}

func (c *countCRC) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.limit {
		return 0, fmt.Errorf("snapshottest: data function wrote more than the %d bytes the header declares", c.limit)
	}
	n, err := c.w.Write(p)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	c.n += int64(n)
	return n, err
}
