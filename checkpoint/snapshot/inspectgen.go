package snapshot

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"text/tabwriter"
)

// objectReport is what Inspect learned of one generation object a manifest references.
type objectReport struct {
	ref     GenRef
	setBits uint64 // of stage 0
	err     error  // nil: read and checked; errNotRead: no opener
}

var errNotRead = errors.New("not read")

// GenSections returns the word counts of the sections of generation gen's object, as the
// manifest h implies them: its stage 0 block in every group, then each of its grown stages.
func (h *Header) GenSections(gen uint64) []uint64 {
	secs := []uint64{h.Groups * uint64(h.Sectors) * uint64(h.SectorBits/64)}
	for _, st := range h.Stages {
		if st.Generation == gen {
			secs = append(secs, st.Words)
		}
	}
	return secs
}

// inspectRefs reads the generation objects a manifest references, counting the set bits of each
// generation's stage 0 and checking each object against its reference.
func inspectRefs(h *Header, open ObjectOpener) dataReport {
	rep := dataReport{counts: make([]uint64, h.Slots), unknown: make([]bool, h.Slots)}
	for i, g := range h.Gens {
		o := objectReport{ref: h.Refs[i], err: errNotRead}
		if open != nil {
			o.setBits, o.err = readObject(h, g.Number, h.Refs[i], open)
			if o.err != nil && rep.err == nil {
				rep.err = fmt.Errorf("%s: %w", h.Refs[i].Object, o.err)
			}
		}
		rep.counts[g.Slot], rep.unknown[g.Slot] = o.setBits, o.err != nil
		rep.objects = append(rep.objects, o)
	}
	return rep
}

// readObject reads the object ref names, which must hold generation gen of manifest h, and
// returns the set bits of its stage 0.
func readObject(h *Header, gen uint64, ref GenRef, open ObjectOpener) (uint64, error) {
	rc, size, err := open(ref.Object)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	if size >= 0 && size != ref.Size {
		return 0, corruptf("the object is %d bytes, the manifest says %d", size, ref.Size)
	}
	d := NewGenDecoder(rc, ref.Size)
	gh, err := d.Header()
	if err != nil {
		return 0, err
	}
	if want := h.GenSections(gen); gh.Generation != gen || !slices.Equal(gh.Sections, want) {
		return 0, corruptf("holds generation %d in sections %v, the manifest says generation %d in %v", gh.Generation, gh.Sections, gen, want)
	}
	set, err := countSetBits(d, gh.Sections[0])
	if err == nil {
		err = d.Verify()
	}
	if err == nil && d.Checksum() != ref.Checksum {
		err = corruptf("checksum %08x, the manifest says %08x", d.Checksum(), ref.Checksum)
	}
	return set, err
}

// countSetBits reads the next n words of d and counts their set bits.
func countSetBits(d *GenDecoder, n uint64) (uint64, error) {
	buf := make([]uint64, ChunkWords)
	var set uint64
	for n > 0 {
		b := buf[:min(n, ChunkWords)]
		if err := d.ReadWords(b); err != nil {
			return set, err
		}
		for _, w := range b {
			set += uint64(bits.OnesCount64(w))
		}
		n -= uint64(len(b))
	}
	return set, nil
}

// writeObjects lists the generation objects of a manifest with their state.
func writeObjects(ew *errWriter, h *Header, objs []objectReport) {
	fmt.Fprintf(ew, "generation objects:\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	var total int64
	for i, o := range objs {
		status := "OK"
		if o.err != nil {
			status = "DAMAGED: " + o.err.Error()
			if errors.Is(o.err, errNotRead) {
				status = "not read"
			}
		}
		total += o.ref.Size
		fmt.Fprintf(tw, "  %d\t%s\t%s\tchecksum %08x\t%s\n", h.Gens[i].Number, o.ref.Object, fmtBytes(uint64(o.ref.Size)), o.ref.Checksum, status)
	}
	_ = tw.Flush()
	fmt.Fprintf(ew, "  total %s for %s of filter words\n", fmtBytes(uint64(total)), fmtBytes(h.Words*8))
}

// InspectGen writes a human-readable report about the generation object in r to w: its
// generation, the words and set bits of each section, its size against the raw words, and
// whether its checksum holds. It returns the decoder's error after the report (an error wrapping
// ErrCorrupt for a damaged object), or the error writing to w.
func InspectGen(w io.Writer, r io.Reader) error {
	d := NewGenDecoder(r, availableBytes(r))
	h, err := d.Header()
	if err != nil {
		return err
	}
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "format:      %s version %d (generation object)\n", GenMagic, h.Version)
	fmt.Fprintf(ew, "generation:  %d\n", h.Generation)
	var derr error
	for i, n := range h.Sections {
		set, err := countSetBits(d, n)
		name := "stage 0"
		if i > 0 {
			name = fmt.Sprintf("grown stage %d", i)
		}
		fmt.Fprintf(ew, "section %d:   %s, %d words, %d bits set (%.4f of 63 data bits per word)\n", i, name, n, set, float64(set)/float64(n*63))
		if err != nil {
			derr = err
			break
		}
	}
	if derr == nil {
		derr = d.Verify()
	}
	fmt.Fprintf(ew, "size:        %s for %s of words\n", fmtBytes(uint64(d.n)), fmtBytes(h.Words()*8))
	if derr != nil {
		fmt.Fprintf(ew, "checksum:    NOT VERIFIED: %v\n", derr)
	} else {
		fmt.Fprintf(ew, "checksum:    OK (%08x)\n", d.Checksum())
	}
	if ew.err != nil {
		return ew.err
	}
	return derr
}
