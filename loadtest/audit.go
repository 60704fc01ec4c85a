package loadtest

import (
	"context"
	"fmt"
	"strconv"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// The worker's audit topic headers (consumer.AuditHeader*; loadtest does not import consumer).
const (
	auditHeaderPartition = "kdedup-source-partition"
	auditHeaderOffset    = "kdedup-source-offset"
	auditHeaderReason    = "kdedup-reason"
)

// AuditRec is one record of this run found in the worker's audit topic.
type AuditRec struct {
	// Seq is the record's lt-seq.
	Seq int64
	// Partition and Offset are its kdedup-source-partition and -offset headers (-1: missing or
	// not a number); Reason its kdedup-reason header.
	Partition int32
	Offset    int64
	Reason    string
}

// AuditCount is the verifier's account of the audit topic: with it, every record sent must be in
// exactly one of the output and the audit topic, each lost unique event (a false positive) in
// the audit topic with its source coordinates.
type AuditCount struct {
	// Records counts the distinct records of this run in the audit topic, ByReason by reason;
	// Repeats the further copies (a crash under at-least-once rewrites what followed the last
	// commit).
	Records  int            `json:"records"`
	ByReason map[string]int `json:"by_reason"`
	Repeats  int            `json:"repeats"`
	// Unaccounted counts records sent that are in neither the output nor the audit topic; InBoth
	// those in both (outside mark mode, where duplicates are in both by design).
	Unaccounted int `json:"unaccounted"`
	InBoth      int `json:"in_both"`
	// BadSource counts audit records whose source partition is not the record's input partition,
	// or whose source offset is missing; Unknown those with an lt-seq never sent.
	BadSource int `json:"bad_source"`
	Unknown   int `json:"unknown"`
	// LostAudited counts the lost unique events (Verdict.Lost: false positives) found in the
	// audit topic, with their source coordinates.
	LostAudited int `json:"lost_audited"`
}

// checkAudit accounts for every record sent in the output and the audit topic, without one
// nothing.
func (vr *verifier) checkAudit() {
	if vr.in.audit == nil {
		return
	}
	a := &AuditCount{ByReason: map[string]int{}}
	vr.v.Audit = a
	n := int64(len(vr.in.sent))
	copies := make([]uint8, n)
	for _, r := range vr.in.audit {
		if r.Seq < 0 || r.Seq >= n || vr.in.sent[r.Seq].kind == KindMarker {
			a.Unknown++
			continue
		}
		if r.Partition != vr.in.sent[r.Seq].part || r.Offset < 0 {
			a.BadSource++
			vr.example("audit record of seq %d names source partition %d offset %d; it was sent to partition %d",
				r.Seq, r.Partition, r.Offset, vr.in.sent[r.Seq].part)
		}
		if copies[r.Seq] == 0 {
			a.Records++
			a.ByReason[r.Reason]++
		} else {
			a.Repeats++
		}
		if copies[r.Seq] < 255 {
			copies[r.Seq]++
		}
	}
	marking := vr.v.Marked > 0
	for s, r := range vr.in.sent {
		if r.kind == KindMarker || vr.excluded[s] {
			continue
		}
		switch out, aud := vr.delivered[s] > 0, copies[s] > 0; {
		case !out && !aud:
			a.Unaccounted++
			vr.example("seq %d (%s of event %d, partition %d) is in neither the output nor the audit topic", s, r.kind, r.ord, r.part)
		case out && aud && !marking:
			a.InBoth++
			vr.example("seq %d (%s of event %d) is in both the output and the audit topic", s, r.kind, r.ord)
		}
	}
	for _, s := range vr.lostSeqs {
		if copies[s] > 0 {
			a.LostAudited++
		}
	}
}

// auditFailures returns why the audit topic fails the run: a record in neither or both topics, a
// lost event not in the audit topic, an audit record without its source.
func (r *Report) auditFailures() []string {
	a := r.Verdict.Audit
	if a == nil {
		return nil
	}
	var f []string
	if a.Unaccounted > 0 {
		f = append(f, fmt.Sprintf("%d records are in neither the output nor the audit topic", a.Unaccounted))
	}
	if a.InBoth > 0 {
		f = append(f, fmt.Sprintf("%d records are in both the output and the audit topic", a.InBoth))
	}
	if lost := r.Verdict.Lost; a.LostAudited != lost {
		f = append(f, fmt.Sprintf("%d of %d lost unique events are not in the audit topic", lost-a.LostAudited, lost))
	}
	if a.BadSource > 0 {
		f = append(f, fmt.Sprintf("%d audit records do not name their source partition and offset", a.BadSource))
	}
	return f
}

// readAudit returns the records of run runID in the audit topic cfg.AuditTopic from starts (one
// offset per partition) to its end, or nil without an audit topic.
func readAudit(ctx context.Context, cfg Config, client *kafkaio.Client, starts []int64) ([]AuditRec, error) {
	if cfg.AuditTopic == "" {
		return nil, nil
	}
	_, ends, err := kafkaio.TopicOffsets(ctx, client, cfg.AuditTopic, len(starts))
	if err != nil {
		return nil, fmt.Errorf("loadtest: audit topic: %w", err)
	}
	out := []AuditRec{}
	for p, start := range starts {
		err := kafkaio.Read(ctx, client, kafkaio.Range{Topic: cfg.AuditTopic, Partition: p, Start: start, End: ends[p]},
			func(recs []kafkaio.Record) error {
				for _, r := range recs {
					if a, ok := auditRec(r.Headers, cfg.RunID); ok {
						out = append(out, a)
					}
				}
				return nil
			})
		if err != nil {
			return nil, fmt.Errorf("loadtest: reading the audit topic: %w", err)
		}
	}
	return out, nil
}

// auditRec returns the audit record of run runID that headers describe.
func auditRec(headers []kafkaio.Header, runID string) (AuditRec, bool) {
	a := AuditRec{Seq: -1, Partition: -1, Offset: -1}
	ours := false
	for _, h := range headers {
		switch h.Key {
		case HeaderRun:
			ours = string(h.Value) == runID
		case HeaderSeq:
			a.Seq = parseSeq(h.Value)
		case auditHeaderPartition:
			if p, err := strconv.ParseInt(string(h.Value), 10, 32); err == nil {
				a.Partition = int32(p)
			}
		case auditHeaderOffset:
			if o, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
				a.Offset = o
			}
		case auditHeaderReason:
			a.Reason = string(h.Value)
		}
	}
	return a, ours && a.Seq >= 0
}
