package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"slices"

	"github.com/kdedup/kdedup/checkpoint/snapshot"
)

// GenReader reads a generation object that a manifest references, and checks it against the
// reference: the object's size, its header (the generation and section sizes the manifest
// implies), and, with the last word, its checksum and the one the reference records. Every
// mismatch is corruption (an error wrapping snapshot.ErrCorrupt), so that Load falls back to an
// older checkpoint. It is not safe for concurrent use.
type GenReader struct {
	r    ObjectReader
	d    *snapshot.GenDecoder
	ref  snapshot.GenRef
	left uint64
	sum  hash.Hash // SHA-256 of the bytes read, when ref has one
}

// OpenGeneration opens the generation object ref names, a generation of unit, and checks its size
// and header against what the manifest says: generation number gen, sections of the given word
// counts (window.Meta.Sections). A missing object yields an error wrapping fs.ErrNotExist. The
// caller must Close the reader.
func (s *Store) OpenGeneration(ctx context.Context, unit string, ref snapshot.GenRef, gen uint64, sections []uint64) (*GenReader, error) {
	r, err := s.OpenObject(ctx, unit, ref.Object)
	if err != nil {
		return nil, err
	}
	g := &GenReader{r: r, ref: ref}
	if size := r.Size(); size >= 0 && size != ref.Size {
		_ = r.Close()
		return nil, fmt.Errorf("%w: %s is %d bytes, the manifest says %d", snapshot.ErrCorrupt, ref.Object, size, ref.Size)
	}
	var src io.Reader = ctxReader{ctx, r}
	if ref.SHA256 != ([sha256.Size]byte{}) { // a signed manifest's reference: hash what is read
		g.sum = sha256.New()
		src = io.TeeReader(src, g.sum)
	}
	g.d = snapshot.NewGenDecoder(src, ref.Size)
	h, err := g.d.Header()
	if err == nil && (h.Generation != gen || !slices.Equal(h.Sections, sections)) {
		err = fmt.Errorf("%w: holds generation %d in sections %v, the manifest says generation %d in %v",
			snapshot.ErrCorrupt, h.Generation, h.Sections, gen, sections)
	}
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("%s: %w", ref.Object, err)
	}
	g.left = h.Words()
	return g, nil
}

// ReadWords fills dst with the object's next len(dst) words. The call that reads the last word
// also verifies the object's checksum, and the checksum the manifest recorded.
func (g *GenReader) ReadWords(dst []uint64) error {
	if err := g.d.ReadWords(dst); err != nil {
		return fmt.Errorf("%s: %w", g.ref.Object, err)
	}
	g.left -= uint64(len(dst))
	if g.left == 0 {
		return g.checkSums()
	}
	return nil
}

// checkSums checks, once the whole object was read, its checksum and, for a signed manifest's
// reference, its SHA-256 against the reference's: a mismatch of the latter wraps ErrUntrusted and
// snapshot.ErrBadSignature, as the object is not the one the signer wrote.
func (g *GenReader) checkSums() error {
	if g.d.Checksum() != g.ref.Checksum {
		return fmt.Errorf("%w: %s has checksum %08x, the manifest says %08x", snapshot.ErrCorrupt, g.ref.Object, g.d.Checksum(), g.ref.Checksum)
	}
	if g.sum != nil && !bytes.Equal(g.sum.Sum(nil), g.ref.SHA256[:]) {
		return fmt.Errorf("%w: %w: %s is not the generation object the signed manifest references (SHA-256 differs)",
			ErrUntrusted, snapshot.ErrBadSignature, g.ref.Object)
	}
	return nil
}

// Verify reads what is left of the object and checks it as ReadWords does.
func (g *GenReader) Verify() error {
	if err := g.d.Verify(); err != nil {
		return fmt.Errorf("%s: %w", g.ref.Object, err)
	}
	return g.checkSums()
}

// Close closes the object.
func (g *GenReader) Close() error {
	if err := g.r.Close(); err != nil {
		return fmt.Errorf("checkpoint: closing %s: %w", g.ref.Object, err)
	}
	return nil
}
