package snapshot

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// genFill is the measured state of one generation's slot.
type genFill struct {
	// Slot is the slot index the generation lives in.
	Slot int
	// SetBits is the number of bits set in the slot's blocks.
	SetBits uint64
	// Bits is the number of data bits the slot owns (Groups × Sectors ×
	// SectorBits, less the tag bits from version 3 on).
	Bits uint64
	// Fill is SetBits / Bits.
	Fill float64
	// EstimatedKeys is the Swamidass–Baldi estimate
	// -(m/k)·ln(1 - X/m) of distinct keys inserted (+Inf when saturated).
	EstimatedKeys float64
	// FPR is Fill^K, the false positive probability contributed by this
	// generation.
	FPR float64
}

// dataBits returns the number of data bits one generation owns: all its
// bits, less one tag bit per word from version 3 on.
func (h *Header) dataBits() uint64 {
	if h.Tagged() {
		return h.BitsPerGeneration() / 64 * 63
	}
	return h.BitsPerGeneration()
}

// fillOf computes the statistics of one slot.
func fillOf(h *Header, slot int, set uint64) genFill {
	m := float64(h.dataBits())
	x := float64(set)
	g := genFill{Slot: slot, SetBits: set, Bits: h.dataBits(), Fill: x / m}
	if x >= m {
		g.EstimatedKeys = math.Inf(1)
	} else {
		g.EstimatedKeys = -(m / float64(h.K)) * math.Log1p(-x/m)
	}
	g.FPR = math.Pow(g.Fill, float64(h.K))
	return g
}

// Inspect writes a human-readable report about the snapshot in r to w: the
// header fields, the generation table with start times, ages (relative to
// the snapshot's creation time), fill ratio, estimated keys and FPR
// contribution of each generation, the estimated overall FPR, the covered
// input and output offsets, and the status of both checksums and of the file
// length. It streams the data (constant memory, whatever the snapshot size).
// For a manifest it lists the generation objects it references without
// reading them (see InspectManifest).
//
// Inspect tolerates a bad checksum or length as long as the header parses
// and its parameters are consistent: it still writes the full report, marks
// the problem, and then returns an error wrapping ErrCorrupt (so a CLI can
// exit non-zero). If the header cannot be parsed at all it writes nothing
// and returns the decoder's error (ErrCorrupt, ErrNotSnapshot,
// ErrUnknownVersion, or the reader's). An error writing to w is returned as
// is.
func Inspect(w io.Writer, r io.Reader) error { return InspectManifest(w, r, nil) }

// ObjectOpener opens an object a manifest references, by name: its reader
// and its size (-1 when unknown). An object that does not exist yields an
// error wrapping fs.ErrNotExist.
type ObjectOpener func(name string) (io.ReadCloser, int64, error)

// InspectManifest is Inspect for a snapshot that may be a manifest: the
// generations' fill comes from the generation objects open returns, each
// checked against its reference (header, size, checksums), and the report
// lists them with their status. A missing or damaged object is reported,
// and makes InspectManifest return an error wrapping ErrCorrupt (or
// fs.ErrNotExist) after the full report. A nil open reads no object.
func InspectManifest(w io.Writer, r io.Reader, open ObjectOpener) error {
	d := newDecoder(r, availableBytes(r), true)
	h, err := d.Header()
	if err != nil {
		return err
	}
	var rep dataReport
	if h.Manifest() {
		rep = inspectRefs(&h, open)
	} else {
		var wordsRead uint64
		rep.counts, wordsRead = countSlots(d, &h)
		rep.truncated = wordsRead < h.Words
	}
	verr := d.Verify()
	readErr := d.err // truncation or I/O error while reading the data

	ew := &errWriter{w: w}
	if err := writeHeader(ew, &h); err != nil {
		return err
	}
	if err := writeGens(ew, &h, rep); err != nil {
		return err
	}
	writeChecks(ew, d, readErr)
	switch {
	case ew.err != nil:
		return ew.err
	case readErr != nil:
		return readErr
	case verr != nil:
		return verr
	}
	return rep.err
}

// dataReport is what Inspect learned from a snapshot's data: the set bits of each slot, and for
// a manifest the state of each referenced object.
type dataReport struct {
	counts    []uint64
	unknown   []bool // per slot: its count could not be read (a manifest's object was not read)
	truncated bool
	objects   []objectReport // per generation of a manifest
	err       error          // the first damaged object's error
}

// writeHeader writes the header fields.
func writeHeader(ew *errWriter, h *Header) error {
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	kind := ""
	if h.Manifest() {
		kind = " (manifest: the data is in the generation objects listed below)"
	}
	p("format:\t%s version %d%s\n", Magic, h.Version, kind)
	p("created:\t%s\n", fmtTime(h.Created))
	if h.Version >= VersionV7 {
		p("owner epoch:\t%d\n", h.OwnerEpoch)
	}
	if h.Scope == ScopeGlobal {
		p("scope:\tglobal (topic %q)\n", h.Topic)
	} else {
		p("scope:\tpartition %d of topic %q\n", h.Partition, h.Topic)
	}
	switch {
	case !h.KeySpecKnown():
		p("identity:\tnot recorded (format version %d)\n", h.Version)
	case h.KeySpec == "":
		p("identity:\tnot said by the writer\n")
	default:
		p("identity:\t%s\n", h.KeySpec)
	}
	switch {
	case h.Signature != nil:
		p("signature:\tHMAC-SHA256 %x, SHA-256 per generation object (inspect has no key: not verified)\n", h.Signature)
	case h.Manifest():
		p("signature:\tnone (a worker with CHECKPOINT_SIGNING_KEY rejects it)\n")
	}
	p("window:\t%d generations × %v = %v\n", h.Generations, h.Interval, time.Duration(h.Generations)*h.Interval)
	p("capacity:\t%d keys per interval\n", h.Capacity)
	p("configured FPR:\t%g\n", h.FalsePositiveRate)
	p("hashing:\tk=%d%s seed fingerprint=%s\n", h.K, firstWordNote(h), h.SeedFingerprint())
	p("layout:\t%d groups × %d slots × %d sectors of %d bits = %d words (%s), %d bits per generation\n",
		h.Groups, h.Slots, h.Sectors, h.SectorBits, h.Words, fmtBytes(h.Words*8), h.BitsPerGeneration())
	if h.Tagged() {
		p("slot uses:\t%v (bit 63 of a word is its use's parity; words of an earlier use count as empty)\n", h.SlotUses)
	} else {
		p("note:\tformat version %d holds the filter layout of an older kdedup; this build cannot restore it\n", h.Version)
	}
	if len(h.Stages) > 0 {
		p("grown stages:\t%d (%d words after the slots' words; %d fill-counter shards)\n", len(h.Stages), h.StageWords(), 1<<h.ShardBits)
	}
	p("epoch:\tcurrent generation %d, %d rotations, origin %s\n", h.Epoch, h.Rotations, fmtTime(h.Origin))
	return tw.Flush()
}

// writeGens writes the generation table, the free slots, the estimated FPR, the generation
// objects of a manifest and the offsets.
func writeGens(ew *errWriter, h *Header, rep dataReport) error {
	fmt.Fprintf(ew, "\ngenerations (newest first)%s:\n", map[bool]string{true: " — PARTIAL, data truncated", false: ""}[rep.truncated])
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "gen\tnumber\tslot\tstart (UTC)\tage\tfill\test. keys\tFPR (fill^k)\t\n")
	used := make([]bool, h.Slots)
	var sumFPR float64
	for i, g := range h.Gens {
		used[g.Slot] = true
		age := "-"
		if !g.Start.IsZero() && !h.Created.IsZero() {
			age = h.Created.Sub(g.Start).Round(time.Millisecond).String()
		}
		if rep.unknown != nil && rep.unknown[g.Slot] {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t-\t-\t-\t\n", i, g.Number, g.Slot, fmtTime(g.Start), age)
			continue
		}
		f := fillOf(h, g.Slot, rep.counts[g.Slot])
		sumFPR += f.FPR
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%.4f\t%.0f\t%.3g\t\n", i, g.Number, g.Slot, fmtTime(g.Start), age, f.Fill, f.EstimatedKeys, f.FPR)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var spare []string
	for s, u := range used {
		if !u && !h.Manifest() {
			spare = append(spare, fmt.Sprintf("slot %d fill %.4f", s, fillOf(h, s, rep.counts[s]).Fill))
		}
	}
	if len(spare) > 0 {
		fmt.Fprintf(ew, "free slots: %s\n", strings.Join(spare, ", "))
	}
	fmt.Fprintf(ew, "estimated FPR: %.3g (sum of fill^k over generations, configured %g; a union bound that ignores block-to-block variance, so a blocked filter runs somewhat higher)\n",
		sumFPR, h.FalsePositiveRate)
	if h.Manifest() {
		writeObjects(ew, h, rep.objects)
	}
	printOffsets(ew, "input offsets (next offset to consume)", h.InputOffsets, false)
	printOffsets(ew, "output offsets (high-water at snapshot)", h.OutputOffsets, h.Version < VersionV2)
	return nil
}

// writeChecks writes the status of the checksums and of the file length.
func writeChecks(ew *errWriter, d *Decoder, readErr error) {
	fmt.Fprintln(ew)
	status := func(err error) string {
		if err == nil {
			return "OK"
		}
		return "MISMATCH: " + err.Error()
	}
	fmt.Fprintf(ew, "header checksum: %s\n", status(d.headerCRCErr))
	if d.avail >= 0 {
		fmt.Fprintf(ew, "file length: %s\n", status(d.sizeErr))
	}
	switch {
	case readErr != nil:
		fmt.Fprintf(ew, "file checksum: NOT VERIFIED: %v\n", readErr)
	default:
		fmt.Fprintf(ew, "file checksum: %s\n", status(d.finErr))
	}
}

// firstWordNote describes where a version 5 key puts its first bits.
func firstWordNote(h *Header) string {
	if h.Version < VersionV5 {
		return ""
	}
	return fmt.Sprintf(" (%d in one word of sector 0, stored word-major)", h.FirstBits)
}

// countSlots streams the data of d and counts the set data bits per slot;
// from version 3 on, words whose tag is not their slot's use parity count as
// empty and tag bits never count. It returns the counts and the number of
// words read (fewer than h.Words if the data is truncated).
func countSlots(d *Decoder, h *Header) (counts []uint64, wordsRead uint64) {
	counts = make([]uint64, h.Slots)
	wpb := uint64(h.SectorBits / 64)
	groupWords := uint64(h.Slots*h.Sectors) * wpb
	buf := make([]byte, int(min(h.DataBytes(), 1<<20)))
	if len(buf) == 0 {
		return counts, 0
	}
	for {
		n, err := io.ReadFull(d, buf)
		for i := 0; i+8 <= n; i += 8 {
			idx := wordsRead + uint64(i/8)
			if idx >= h.SlotWords() {
				continue // a grown stage's word
			}
			slot := int(idx % groupWords / wpb % uint64(h.Slots))
			if q := idx % groupWords; h.Version >= VersionV5 && q < wpb*uint64(h.Slots) {
				slot = int(q % uint64(h.Slots)) // sector 0 is stored word-major
			}
			x := binary.LittleEndian.Uint64(buf[i:])
			if h.Tagged() {
				if x>>63 != h.SlotUses[slot]&1 {
					x = 0
				}
				x &^= 1 << 63
			}
			counts[slot] += uint64(bits.OnesCount64(x))
		}
		wordsRead += uint64(n / 8)
		if err != nil {
			return counts, wordsRead
		}
	}
}

func printOffsets(w io.Writer, title string, m map[int32]int64, absent bool) {
	fmt.Fprintf(w, "%s:", title)
	switch {
	case absent:
		fmt.Fprintln(w, " not recorded (format version 1)")
		return
	case len(m) == 0:
		fmt.Fprintln(w, " none")
		return
	}
	fmt.Fprintln(w)
	keys := make([]int32, 0, len(m))
	for p := range m {
		keys = append(keys, p)
	}
	slices.Sort(keys)
	for _, p := range keys {
		fmt.Fprintf(w, "  partition %d: %d\n", p, m[p])
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// errWriter remembers the first write error and drops later writes.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
