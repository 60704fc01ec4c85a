package loadtest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// DefaultOversizeBytes is Config.OversizeBytes's default: twice the 1 MiB that a topic takes by
// default (max.message.bytes).
const DefaultOversizeBytes = 2 << 20

// Headers the worker adds to a dead letter: consumer.DeadLetterHeaderError and
// consumer.DeadLetterHeaderSourceOffset, which loadtest may not import; a test asserts that they
// are equal.
const (
	deadLetterHeaderError  = "kdedup-error"
	deadLetterHeaderOffset = "kdedup-source-offset"
)

// Block is an input partition that stopped at an oversized record the output refused: the
// record, and every record of the partition sent after it, never appeared.
type Block struct {
	Partition int32 `json:"partition"`
	// Seq is the oversized record's lt-seq.
	Seq int `json:"seq"`
	// Held counts the records of the partition sent after it (end marker excluded): the worker
	// did not process them, and they are not judged.
	Held int `json:"held"`
}

// oversized returns v padded to cfg.OversizeBytes; a JSON value keeps its padding inside its
// lt_pad string, so that the worker still finds the event id.
func oversized(v []byte, cfg Config) []byte {
	n := cfg.OversizeBytes - len(v)
	if n <= 0 {
		return v
	}
	tail := 0
	if cfg.Field.Kind == FieldJSON {
		tail = 2 // `"}` closes lt_pad and the object
	}
	out := make([]byte, 0, cfg.OversizeBytes)
	out = append(out, v[:len(v)-tail]...)
	out = append(out, bytes.Repeat([]byte{'x'}, n)...)
	return append(out, v[len(v)-tail:]...)
}

// refusals finds what became of the oversized records: delivered; refused by a partition that
// went on (the worker wrote them to its dead-letter topic: Verdict.DeadLetters counts those found
// there); or where their partition blocked, which is when neither the record nor any later
// record of its partition (end marker included) appeared. Refused records and the records behind
// a block are excluded from judgment: the worker never judged the ones behind.
func (vr *verifier) refusals() {
	sent, v := vr.in.sent, &vr.v
	vr.excluded = make([]bool, len(sent))
	last := map[int32]int{} // partition → highest lt-seq that appeared
	for s, r := range sent {
		if vr.anyAt[s] >= 0 {
			last[r.part] = s
		}
	}
	blocked := map[int32]int{} // partition → index in v.Blocked
	for s, r := range sent {
		if b, ok := blocked[r.part]; ok {
			if r.kind != KindMarker {
				vr.excluded[s] = true
				v.Blocked[b].Held++
			}
			continue
		}
		if !r.oversize {
			continue
		}
		v.Oversize++
		l, ok := last[r.part]
		switch {
		case vr.delivered[s] > 0:
			v.OversizeDelivered++
		case ok && l > s:
			v.Refused++
			vr.excluded[s] = true
			if vr.in.deadLetters[int64(s)] {
				v.DeadLetters++
			}
		default:
			vr.excluded[s] = true
			blocked[r.part] = len(v.Blocked)
			v.Blocked = append(v.Blocked, Block{Partition: r.part, Seq: s})
		}
	}
}

// readDeadLetters returns the lt-seq of every record of this run in cfg.DeadLetterTopic from
// starts (one offset per partition) to its end that carries the worker's dead-letter headers
// (the error, the source offset). It returns nil without a dead-letter topic.
func readDeadLetters(ctx context.Context, cfg Config, client *kafkaio.Client, starts []int64) (map[int64]bool, error) {
	if cfg.DeadLetterTopic == "" {
		return nil, nil
	}
	_, ends, err := kafkaio.TopicOffsets(ctx, client, cfg.DeadLetterTopic, len(starts))
	if err != nil {
		return nil, fmt.Errorf("loadtest: dead-letter topic: %w", err)
	}
	out := map[int64]bool{}
	for p, start := range starts {
		err := kafkaio.Read(ctx, client, kafkaio.Range{Topic: cfg.DeadLetterTopic, Partition: p, Start: start, End: ends[p]},
			func(recs []kafkaio.Record) error {
				for _, r := range recs {
					if seq, ok := deadLetterSeq(r.Headers, cfg.RunID); ok {
						out[seq] = true
					}
				}
				return nil
			})
		if err != nil {
			return nil, fmt.Errorf("loadtest: reading the dead-letter topic: %w", err)
		}
	}
	return out, nil
}

// deadLetterSeq returns the lt-seq of a dead letter of run runID that carries the worker's
// dead-letter headers.
func deadLetterSeq(headers []kafkaio.Header, runID string) (int64, bool) {
	seq, ours, worker := int64(-1), false, 0
	for _, h := range headers {
		switch h.Key {
		case HeaderRun:
			ours = string(h.Value) == runID
		case HeaderSeq:
			seq = parseSeq(h.Value)
		case deadLetterHeaderError, deadLetterHeaderOffset:
			if len(h.Value) > 0 {
				worker++
			}
		}
	}
	return seq, ours && seq >= 0 && worker == 2
}

// oversizeFailures returns why the oversized records fail the run: with a dead-letter topic,
// every refused one must be there and no partition may block; without one, a refused record
// whose partition went on was dropped.
func (r *Report) oversizeFailures() []string {
	v, dlq := r.Verdict, r.Settings.DeadLetterTopic
	var f []string
	switch {
	case dlq != "" && len(v.Blocked) > 0:
		f = append(f, fmt.Sprintf("%d partitions blocked at an oversized record although the worker has the dead-letter topic %q", len(v.Blocked), dlq))
	case dlq != "" && v.DeadLetters < v.Refused:
		f = append(f, fmt.Sprintf("%d oversized records refused by the output, only %d of them in the dead-letter topic %q with the worker's headers",
			v.Refused, v.DeadLetters, dlq))
	case dlq == "" && v.Refused > 0:
		f = append(f, fmt.Sprintf("%d oversized records were not delivered and their partitions went on: dropped (give the worker's dead-letter topic with -dead-letter-topic)", v.Refused))
	}
	return f
}

// writeOversize writes the summary rows of the oversized records.
func (r *Report) writeOversize(row func(name, format string, a ...any)) {
	v := r.Verdict
	if v.Oversize == 0 {
		return
	}
	dl := ""
	if r.Settings.DeadLetterTopic != "" {
		dl = fmt.Sprintf(", %d of them in the dead-letter topic %s", v.DeadLetters, r.Settings.DeadLetterTopic)
	}
	row("oversize", "%d records of %s: %d delivered, %d refused%s, %d partitions blocked", v.Oversize,
		fmtBytes(uint64(r.Settings.OversizeBytes)), v.OversizeDelivered, v.Refused, dl, len(v.Blocked))
	blocks := slices.Clone(v.Blocked)
	slices.SortFunc(blocks, func(a, b Block) int { return int(a.Partition - b.Partition) })
	var parts []string
	for _, b := range blocks {
		parts = append(parts, fmt.Sprintf("partition %d at seq %d (%d records behind it)", b.Partition, b.Seq, b.Held))
	}
	if len(parts) > 0 {
		row("", "blocked: %s; everything before was judged as usual", strings.Join(parts, ", "))
	}
}
