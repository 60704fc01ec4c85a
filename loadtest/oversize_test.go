package loadtest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
)

// TestDeadLetterHeadersAreTheWorkers proves that the dead-letter headers the verifier looks for
// are the worker's: loadtest keeps its own copy only because it may not import consumer.
func TestDeadLetterHeadersAreTheWorkers(t *testing.T) {
	if deadLetterHeaderError != consumer.DeadLetterHeaderError || deadLetterHeaderOffset != consumer.DeadLetterHeaderSourceOffset {
		t.Errorf("headers %q, %q; the worker writes %q, %q", deadLetterHeaderError, deadLetterHeaderOffset,
			consumer.DeadLetterHeaderError, consumer.DeadLetterHeaderSourceOffset)
	}
}

// TestOversizePlan checks the -oversize option: Oversize unique originals without duplicates, the
// i-th on partition i after a share (i+1)/(Oversize+1) of the records, their values padded to
// OversizeBytes (a JSON value stays valid JSON with the event id where the worker looks).
func TestOversizePlan(t *testing.T) {
	for _, field := range []Field{{Kind: FieldKey}, {Kind: FieldJSON, Path: []string{"a", "b"}}} {
		cfg := testConfig()
		cfg.Field, cfg.Oversize, cfg.OversizeBytes = field, 3, 64<<10
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		plan := drawPlan(cfg, 6)
		records, found := 0, 0
		for _, o := range plan {
			records += 1 + len(o.dups)
			if !o.oversize {
				continue
			}
			want := cfg.Count * (found + 1) / (cfg.Oversize + 1)
			if o.part != int32(found) || len(o.dups) != 0 || records < want || records > want+200 {
				t.Errorf("%s: oversized event %d on partition %d with %d duplicates at record %d; want partition %d, none, near %d",
					field, o.ord, o.part, len(o.dups), records, found, want)
			}
			g := newGenerator(cfg, nil, 6, time.Now())
			r := g.buildRecord(0, sentRec{ord: o.ord, entity: o.entity, part: o.part, kind: KindOriginal, oversize: true})
			if len(r.Value) != cfg.OversizeBytes || field.Kind == FieldJSON && !json.Valid(r.Value) {
				t.Errorf("%s: oversized value of %d bytes (valid JSON %v), want %d", field, len(r.Value), json.Valid(r.Value), cfg.OversizeBytes)
			}
			found++
		}
		if found != 3 || records != cfg.Count {
			t.Errorf("%s: %d oversized of %d records, want 3 of %d", field, found, records, cfg.Count)
		}
	}
}

// TestVerifyOversize checks the verdict on an oversized record (seq 7 of the scenario, partition
// 0): delivered; refused while its partition went on (written to the dead-letter topic, or not);
// or where its partition blocked, the records behind it not judged.
func TestVerifyOversize(t *testing.T) {
	lat := 5 * time.Millisecond
	without := func(seqs []int, drop ...int) []int {
		return slices.DeleteFunc(slices.Clone(seqs), func(s int) bool { return slices.Contains(drop, s) })
	}
	all := []int{0, 1, 4, 5, 6, 7, 8, 9}
	for _, tc := range []struct {
		name        string
		delivered   []int
		blockMarker bool           // partition 0's end marker does not appear
		deadLetters map[int64]bool // found in the dead-letter topic
		dlq         string
		want        Verdict
		fail        string // a failure must contain this; "" means pass
	}{
		{"delivered", all, false, nil, "", Verdict{Uniques: 8, Oversize: 1, OversizeDelivered: 1}, ""},
		{"dead-lettered", without(all, 7), false, map[int64]bool{7: true}, "dlq",
			Verdict{Uniques: 7, Oversize: 1, Refused: 1, DeadLetters: 1}, ""},
		{"refused, not in the dead-letter topic", without(all, 7), false, nil, "dlq",
			Verdict{Uniques: 7, Oversize: 1, Refused: 1}, "only 0 of them in the dead-letter topic"},
		{"refused without a dead-letter topic", without(all, 7), false, nil, "",
			Verdict{Uniques: 7, Oversize: 1, Refused: 1}, "dropped"},
		{"blocked", without(all, 7, 9), true, nil, "",
			Verdict{Uniques: 6, Oversize: 1, Blocked: []Block{{Partition: 0, Seq: 7, Held: 1}}}, ""},
		{"blocked despite a dead-letter topic", without(all, 7, 9), true, nil, "dlq",
			Verdict{Uniques: 6, Oversize: 1, Blocked: []Block{{Partition: 0, Seq: 7, Held: 1}}}, "although the worker has the dead-letter topic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := scenario()
			sent[7].oversize = true
			obs := deliver(sent, tc.delivered, lat)
			if tc.blockMarker {
				obs[0] = obs[0][:len(obs[0])-1]
			}
			v := verify(verifyInput{sent: sent, obs: obs, end: int64(4 * time.Second), expect: window3x1s(false), deadLetters: tc.deadLetters}).verdict
			if v.Uniques != tc.want.Uniques || v.Lost != 0 || v.Leaked != 0 || v.Oversize != tc.want.Oversize ||
				v.OversizeDelivered != tc.want.OversizeDelivered || v.Refused != tc.want.Refused || v.DeadLetters != tc.want.DeadLetters ||
				len(v.Blocked) != len(tc.want.Blocked) || len(v.Blocked) > 0 && v.Blocked[0] != tc.want.Blocked[0] {
				t.Errorf("verdict %+v\nwant %+v", v, tc.want)
			}
			r := &Report{Verdict: v, Settings: Settings{FalsePositiveRate: 1e-6, DeadLetterTopic: tc.dlq, OversizeBytes: 1 << 21}}
			r.Judge()
			if got := strings.Join(r.Failures, "; "); tc.fail == "" && !r.Pass || tc.fail != "" && !strings.Contains(got, tc.fail) {
				t.Errorf("failures %q, want %q", got, tc.fail)
			}
			var sum strings.Builder
			if err := r.WriteSummary(&sum); err != nil || !strings.Contains(sum.String(), "oversize") {
				t.Errorf("summary without the oversized records: %s", sum.String())
			}
		})
	}
}
