package app

import (
	"testing"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/dedup"
)

// TestJudgedSetVerdicts proves that every dedup verdict maps to the consumer verdict with the same
// meaning, so that an audit record names why dedup dropped it.
func TestJudgedSetVerdicts(t *testing.T) {
	want := map[dedup.Verdict]consumer.Verdict{
		dedup.VerdictNew:       consumer.VerdictNew,
		dedup.VerdictDuplicate: consumer.VerdictDuplicate,
		dedup.VerdictLate:      consumer.VerdictLate,
		dedup.VerdictOverload:  consumer.VerdictOverload,
	}
	if len(verdicts) != len(want) {
		t.Fatalf("%d verdicts mapped, want %d", len(verdicts), len(want))
	}
	for d, c := range want {
		if verdicts[d] != c {
			t.Errorf("dedup verdict %d maps to %d, want %d", d, verdicts[d], c)
		}
	}
}
