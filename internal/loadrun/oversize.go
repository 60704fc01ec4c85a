package loadrun

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/loadtest"
)

// checkCommitted checks, after a run with oversized records (-oversize) and once the worker
// stopped, where the worker's group committed the input: at its end on every partition, except on
// a partition that blocked, where it must be exactly at the oversized record (everything before
// it committed, nothing past it). It adds a note with the offsets, and a failure for each
// partition that is elsewhere.
func checkCommitted(ctx context.Context, cl *embedkafka.Cluster, report *loadtest.Report, lt loadtest.Config, group string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	committed, err := cl.Committed(ctx, group, lt.InputTopic)
	if err != nil {
		report.AddFailure("cannot read the committed input offsets: " + err.Error())
		return
	}
	ends, err := cl.EndOffsets(ctx, lt.InputTopic)
	if err != nil {
		report.AddFailure("cannot read the input's end offsets: " + err.Error())
		return
	}
	blocked := map[int]loadtest.Block{}
	for _, b := range report.Verdict.Blocked {
		blocked[int(b.Partition)] = b
	}
	var parts []string
	for p := range len(ends) {
		c, end := committed[p], ends[p]
		b, isBlocked := blocked[p]
		switch {
		case !isBlocked && c != end:
			report.AddFailure(fmt.Sprintf("input partition %d committed at %d, not at its end %d", p, c, end))
		case isBlocked:
			if seq, err := seqAt(ctx, cl, lt.InputTopic, p, c); err != nil || seq != b.Seq {
				report.AddFailure(fmt.Sprintf("input partition %d blocked at the oversized record lt-seq %d, but committed at %d (lt-seq %d, %v)",
					p, b.Seq, c, seq, err))
			}
			parts = append(parts, fmt.Sprintf("partition %d at %d of %d (the oversized record)", p, c, end))
		}
	}
	note := fmt.Sprintf("input committed to its end on %d of %d partitions", len(ends)-len(parts), len(ends))
	if len(parts) > 0 {
		note += "; " + strings.Join(parts, ", ")
	}
	report.Notes = append(report.Notes, note)
}

// seqAt returns the lt-seq header of the record at offset of topic's partition p.
func seqAt(ctx context.Context, cl *embedkafka.Cluster, topic string, p int, offset int64) (int, error) {
	seq := -1
	err := kafkaio.Read(ctx, cl.Client(), kafkaio.Range{Topic: topic, Partition: p, Start: offset, End: offset + 1, MaxBytes: 64 << 20},
		func(recs []kafkaio.Record) error {
			for _, r := range recs {
				for _, h := range r.Headers {
					if h.Key == loadtest.HeaderSeq && r.Offset == offset {
						seq, _ = strconv.Atoi(string(h.Value))
					}
				}
			}
			return nil
		})
	return seq, err
}
