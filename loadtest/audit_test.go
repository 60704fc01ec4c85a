package loadtest

import (
	"reflect"
	"testing"
	"time"
)

// TestVerifyAudit checks the audit accounting on the synthetic scenario, with the beyond copy
// (seq 9) lost as a false positive: every record must be in exactly one of the output and the
// audit topic, the lost one in the audit topic, each audit record naming its source partition.
func TestVerifyAudit(t *testing.T) {
	sent := scenario()
	rec := func(seq int) AuditRec {
		return AuditRec{Seq: int64(seq), Partition: sent[seq].part, Offset: int64(seq), Reason: "duplicate"}
	}
	badSource := rec(3)
	badSource.Partition = 1
	for _, tt := range []struct {
		name     string
		audit    []AuditRec
		want     AuditCount
		failures int
	}{
		{"complete", []AuditRec{rec(2), rec(3), rec(9)}, AuditCount{Records: 3, LostAudited: 1}, 0},
		{"repeated after a crash", []AuditRec{rec(2), rec(3), rec(9), rec(9)}, AuditCount{Records: 3, Repeats: 1, LostAudited: 1}, 0},
		{"false positive missing", []AuditRec{rec(2), rec(3)}, AuditCount{Records: 2, Unaccounted: 1}, 2},
		{"delivered and audited", []AuditRec{rec(2), rec(3), rec(9), rec(4)}, AuditCount{Records: 4, InBoth: 1, LostAudited: 1}, 1},
		{"wrong source", []AuditRec{rec(2), badSource, rec(9)}, AuditCount{Records: 3, BadSource: 1, LostAudited: 1}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vo := verify(verifyInput{sent: sent, obs: deliver(sent, []int{0, 1, 4, 5, 6, 7, 8}, time.Millisecond),
				end: int64(4 * time.Second), expect: window3x1s(false), audit: tt.audit})
			a := vo.verdict.Audit
			if a == nil {
				t.Fatal("no audit count")
			}
			got := *a
			got.ByReason, tt.want.ByReason = nil, nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("audit %+v, want %+v", got, tt.want)
			}
			r := &Report{Verdict: vo.verdict}
			if f := r.auditFailures(); len(f) != tt.failures {
				t.Errorf("failures %q, want %d", f, tt.failures)
			}
		})
	}
	if v := verify(verifyInput{sent: sent, obs: deliver(sent, []int{0, 1, 4, 5, 6, 7, 8}, time.Millisecond),
		end: int64(4 * time.Second), expect: window3x1s(false)}).verdict; v.Audit != nil {
		t.Errorf("audit count %+v without an audit topic", v.Audit)
	}
}
