package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// testRefusalReasons stand in for consumer.RefusalReasons(), which cmd/kdedup passes.
var testRefusalReasons = []string{"message_too_large", "invalid_record"}

// refusalObserver mirrors the refused-record methods of consumer.Observer.
type refusalObserver interface {
	DeadLetter(partition int32, reason string)
	PartitionBlocked(partition int32, reason string, blocked bool)
}

var _ refusalObserver = (*Metrics)(nil)

// TestRefusals checks kdedup_dead_letters_total (every known reason exported from the start,
// unknown ones bounded as "other") and kdedup_partition_blocked (a series while blocked, gone
// once the block ends).
func TestRefusals(t *testing.T) {
	m, reg := newTest(t, Options{SkipRuntimeCollectors: true})
	m.DeadLetter(3, "message_too_large")
	m.DeadLetter(3, "message_too_large")
	m.DeadLetter(4, "cosmic ray")
	m.PartitionBlocked(0, "message_too_large", true)
	m.PartitionBlocked(2, "invalid_record", true)
	m.PartitionBlocked(5, "message_too_large", true)
	m.PartitionBlocked(5, "message_too_large", false)
	const want = `
# HELP kdedup_dead_letters_total Records that the output (or duplicates) topic refused for good (reason: message_too_large, record_list_too_large, invalid_record, invalid_timestamp), and input the worker refused to decode (input_too_large, input_too_many_headers, input_corrupt), written to KAFKA_DEAD_LETTER_TOPIC instead (refused input: its coordinates and error only).
# TYPE kdedup_dead_letters_total counter
kdedup_dead_letters_total{reason="invalid_record"} 0
kdedup_dead_letters_total{reason="message_too_large"} 2
kdedup_dead_letters_total{reason="other"} 1
# HELP kdedup_partition_blocked 1 for an input partition that stopped at a record the output refuses for good, or at input the worker refused to decode (reason as in kdedup_dead_letters_total), that no dead-letter topic took: everything before it was written and committed, nothing after it is processed. Absent while no partition is blocked.
# TYPE kdedup_partition_blocked gauge
kdedup_partition_blocked{partition="0",reason="message_too_large"} 1
kdedup_partition_blocked{partition="2",reason="invalid_record"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kdedup_dead_letters_total", "kdedup_partition_blocked"); err != nil {
		t.Fatal(err)
	}
}
