package consumer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// header returns the value of m's last header name, and whether it has one.
func header(m kafkaio.Record, name string) (string, bool) {
	for i := len(m.Headers) - 1; i >= 0; i-- {
		if m.Headers[i].Key == name {
			return string(m.Headers[i].Value), true
		}
	}
	return "", false
}

// auditInput produces to each of e's input partitions n records where every fourth repeats an
// identity and every tenth has no key, and returns them by input partition.
func auditInput(e *env, n int) map[int][]kafkaio.Record {
	rng := rand.New(rand.NewPCG(7, 8))
	in := map[int][]kafkaio.Record{}
	for p := range e.inParts {
		msgs, _ := stream("key", p, n, rng)
		for i := range msgs {
			if i%10 == 9 {
				msgs[i].Key = nil
			}
		}
		e.produce(p, msgs)
		in[p] = msgs
	}
	return in
}

// TestAuditTopic proves the audit topic: with unkeyed records dropped, every input record is in
// exactly one of the output and the audit topic; an audit record is in the partition with its
// input partition's number, keeps the record (or, with AuditHeadersOnly, its headers and
// timestamp only), and says where it came from and why; Diverted counts them by reason.
func TestAuditTopic(t *testing.T) {
	t.Parallel()
	for _, content := range []consumer.AuditContent{consumer.AuditFull, consumer.AuditHeadersOnly} {
		t.Run(string(content), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, 2, 2, embedkafka.Options{Topics: map[string]int32{"audit": 2}})
			in := auditInput(e, 120)
			cfg := e.config()
			cfg.DuplicatesTopic, cfg.DuplicatesContent, cfg.Unkeyed = "audit", content, consumer.UnkeyedDrop
			r := e.start(cfg, newMapDeduper(false, nil), keyFuncFor(t, "key"))
			e.waitAllCommitted(20 * time.Second)
			if err := r.stop(t, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			where := map[string]string{} // input p/offset → "out" or "audit"
			for q, msgs := range e.readOut(e.out) {
				for _, m := range msgs {
					var p, i int
					fmt.Sscanf(string(m.Value), "p%d-r%d", &p, &i)
					if p != q {
						t.Errorf("output partition %d holds %s", q, m.Value)
					}
					where[fmt.Sprintf("%d/%d", p, i)] += "out"
				}
			}
			reasons := map[string]int{}
			for q, msgs := range e.readOut("audit") {
				for _, m := range msgs {
					src := checkAuditRecord(t, q, m, in, content)
					reason, _ := header(m, consumer.AuditHeaderReason)
					reasons[reason]++
					where[src] += "audit"
				}
			}
			wantReasons := map[string]int{}
			for p, msgs := range in {
				for i, reason := range dropReasons(msgs) {
					w := "out"
					if reason != "" {
						w = "audit"
						wantReasons[reason]++
					}
					if got := where[fmt.Sprintf("%d/%d", p, i)]; got != w {
						t.Errorf("input %d/%d is in %q, want %q", p, i, got, w)
					}
				}
			}
			for reason, n := range wantReasons {
				if reasons[reason] != n || r.obs.divertedFor(reason) != int64(n) {
					t.Errorf("reason %s: %d audit records, %d counted, want %d", reason, reasons[reason], r.obs.divertedFor(reason), n)
				}
			}
		})
	}
}

// dropReasons returns why each record of msgs (one partition, identity in the key) is dropped
// under UnkeyedDrop: "" for none.
func dropReasons(msgs []kafkaio.Record) []string {
	seen := map[string]bool{}
	out := make([]string, len(msgs))
	for i, m := range msgs {
		switch {
		case m.Key == nil:
			out[i] = consumer.DropUnkeyed
		case seen[string(m.Key)]:
			out[i] = consumer.DropDuplicate
		}
		seen[string(m.Key)] = true
	}
	return out
}

// checkAuditRecord checks the audit record m of audit partition q against the input in, and
// returns its source as "partition/offset".
func checkAuditRecord(t *testing.T, q int, m kafkaio.Record, in map[int][]kafkaio.Record, content consumer.AuditContent) string {
	t.Helper()
	topic, _ := header(m, consumer.AuditHeaderSourceTopic)
	ps, _ := header(m, consumer.AuditHeaderSourcePartition)
	os, _ := header(m, consumer.AuditHeaderSourceOffset)
	p, err1 := strconv.Atoi(ps)
	off, err2 := strconv.Atoi(os)
	if topic != "in" || err1 != nil || err2 != nil || p != q || p >= len(in) || off >= len(in[p]) {
		t.Fatalf("audit partition %d: record with source %q %q %q", q, topic, ps, os)
	}
	src := in[p][off]
	want := kafkaio.Record{Time: src.Time, Headers: src.Headers}
	if content == consumer.AuditFull {
		want.Key, want.Value = src.Key, src.Value
	}
	got := m
	got.Headers = m.Headers[:len(m.Headers)-4]
	if d := sameRecord(got, want); d != "" {
		t.Errorf("audit record of %d/%d: %s", p, off, d)
	}
	return ps + "/" + os
}

// TestAuditBeforeCommit proves that a batch's input offsets are committed only once its audit
// records were acknowledged too: while the audit topic fails every write, the output gets the
// batch's records but the input is never committed past the first dropped record.
func TestAuditBeforeCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1, embedkafka.Options{Topics: map[string]int32{"audit": 1}})
	fault := e.cl.Fake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "audit", Err: kerr.NotEnoughReplicas, Count: -1})
	in := auditInput(e, 40)
	cfg := e.config()
	cfg.DuplicatesTopic = "audit"
	r := e.start(cfg, newMapDeduper(false, nil), keyFuncFor(t, "key"))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := fault.Wait(ctx, 3); err != nil {
		t.Fatal("the audit topic was not written to:", err)
	}
	eventually(t, 20*time.Second, "output records", func() bool { return len(e.readOut(e.out)[0]) > 0 })
	// The first dropped record is input offset 3 (the first repeat): nothing may be committed past
	// it while its audit record is not acknowledged.
	for range 20 {
		com, err := e.cl.Committed(t.Context(), e.group, e.in)
		if err != nil {
			t.Fatal(err)
		}
		if com[0] > 3 {
			t.Fatalf("input committed up to %d while the audit write of offset 3 failed", com[0])
		}
		time.Sleep(20 * time.Millisecond) // sampling the committed offset, not ordering
	}
	if r.obs.auditErrors.Load() != 0 {
		// The producer retries a retriable error itself: the write is not over yet.
		t.Errorf("%d audit write errors counted while the producer was still retrying", r.obs.auditErrors.Load())
	}
	fault.Remove()
	e.waitAllCommitted(20 * time.Second)
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, reason := range dropReasons(in[0]) {
		if reason == consumer.DropDuplicate {
			want++
		}
	}
	if got := len(e.readOut("audit")[0]); got != want {
		t.Errorf("audit topic holds %d records, want %d", got, want)
	}
}

// judgeByKey is a Deduper and a Judge whose verdict is the record's key: "new", "duplicate",
// "late" or "overload".
type judgeByKey struct{ nopDeduper }

func (judgeByKey) Judge(_ int32, id []byte, _ time.Time) consumer.Verdict {
	return map[string]consumer.Verdict{"duplicate": consumer.VerdictDuplicate, "late": consumer.VerdictLate,
		"overload": consumer.VerdictOverload}[string(id)]
}

// TestAuditReasons proves that a Judge's verdict becomes the audit record's reason, and that
// Seen is not called for a Judge.
func TestAuditReasons(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1, embedkafka.Options{Topics: map[string]int32{"audit": 1}})
	keys := []string{"new", "duplicate", "late", "overload", "new"}
	var in []kafkaio.Record
	for i, k := range keys {
		in = append(in, kafkaio.Record{Key: []byte(k), Value: []byte(strconv.Itoa(i)), Time: baseTime})
	}
	e.produce(0, in)
	cfg := e.config()
	cfg.DuplicatesTopic = "audit"
	r := e.start(cfg, judgeByKey{}, keyFuncFor(t, "key"))
	e.waitAllCommitted(20 * time.Second)
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if out := e.readOut(e.out)[0]; len(out) != 2 {
		t.Errorf("output holds %d records, want the 2 new ones", len(out))
	}
	audit := e.readOut("audit")[0]
	if len(audit) != 3 {
		t.Fatalf("audit topic holds %d records, want 3", len(audit))
	}
	for i, m := range audit {
		reason, _ := header(m, consumer.AuditHeaderReason)
		offset, _ := header(m, consumer.AuditHeaderSourceOffset)
		if reason != string(m.Key) || offset != strconv.Itoa(i+1) {
			t.Errorf("audit record %d: key %s, reason %q, source offset %s", i, m.Key, reason, offset)
		}
		if r.obs.divertedFor(reason) != 1 {
			t.Errorf("reason %s counted %d times, want once", reason, r.obs.divertedFor(reason))
		}
	}
}
