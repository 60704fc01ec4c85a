package consumer

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/kdedup/kdedup/identity"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/tier"
	"github.com/segmentio/kafka-go"
)

// uniqueDeduper takes every record for new.
type uniqueDeduper struct{}

func (uniqueDeduper) Generation(int32, []int32, func(context.Context) error) {}
func (uniqueDeduper) Assign(context.Context, int32) error                    { return nil }
func (uniqueDeduper) Seen(int32, []byte, time.Time) bool                     { return false }
func (uniqueDeduper) Processing(int32, int64)                                {}
func (uniqueDeduper) Rewind(int32, int64)                                    {}
func (uniqueDeduper) Acked(int32, int64)                                     {}
func (uniqueDeduper) Revoke(context.Context, int32) error                    { return nil }
func (uniqueDeduper) Discard(context.Context, int32) error                   { return nil }
func keyOf(_ context.Context, key, _ []byte, _ identity.Headers) ([]byte, identity.Reason, error) {
	return key, identity.Found, nil
}

// fetchedBatch returns a batch as the PartitionReader hands it out: the keys, values and header
// values of its records point into buf, and their headers share one slab, both of which the
// reader reuses after the next Fetch. The records are at offsets 10, 11 and 13 (12 was an aborted
// record), the one at 13 carries a value of big bytes, and Next is 16: the batch ends in skipped
// records and a marker.
func fetchedBatch(big int) (b *kafkaio.Batch, buf []byte, slab []kafkaio.Header) {
	offsets := []int64{10, 11, 13}
	put := func(x []byte) [2]int {
		buf = append(buf, x...)
		return [2]int{len(buf) - len(x), len(buf)}
	}
	spans := make([][3][2]int, len(offsets)) // key, value, header value
	for i, o := range offsets {
		v := fmt.Appendf(nil, "value-%d", o)
		if o == 13 {
			v = append(v, bytes.Repeat([]byte{'v'}, big)...)
		}
		spans[i] = [3][2]int{put(fmt.Appendf(nil, "key-%d", o)), put(v), put(fmt.Appendf(nil, "h-%d", o))}
	}
	at := func(s [2]int) []byte { return buf[s[0]:s[1]:s[1]] }
	b = &kafkaio.Batch{Next: 16, End: 16, Start: time.Now()}
	slab = make([]kafkaio.Header, len(offsets))
	for i, o := range offsets {
		slab[i] = kafkaio.Header{Key: "h", Value: at(spans[i][2])}
		b.Records = append(b.Records, kafkaio.Record{Topic: "in", Offset: o, Time: time.UnixMilli(1_700_000_000_000 + o),
			Key: at(spans[i][0]), Value: at(spans[i][1]), Headers: slab[i : i+1 : i+1]})
	}
	return b, buf, slab
}

// reuse overwrites what the reader would after the next Fetch: buf and the header slab.
func reuse(buf []byte, slab []kafkaio.Header) {
	for i := range buf {
		buf[i] = 'X'
	}
	for i := range slab {
		slab[i] = kafkaio.Header{Key: "reused"}
	}
}

// refusalRig is a Worker on an embedded cluster whose output topic takes 64 KiB (max.message.bytes),
// ready for handleBatch on input partition 0, with a committer to a fakeGen.
type refusalRig struct {
	cl  *embedkafka.Cluster
	w   *Worker
	tc  topicCounts
	c   *committer
	gen *fakeGen
}

func newRefusalRig(t *testing.T, ctx context.Context, deadLetters bool, limited ...string) *refusalRig {
	t.Helper()
	tier.Integration(t)
	cl, err := embedkafka.Start(embedkafka.Options{Topics: map[string]int32{"in": 1, "out": 1, "dlq": 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	r := &refusalRig{cl: cl, gen: &fakeGen{}}
	for _, topic := range limited {
		r.limit(t, ctx, topic, 64<<10)
	}
	cfg := AppDefaults()
	cfg.Brokers, cfg.InputTopic, cfg.OutputTopic, cfg.GroupID = cl.Addrs(), "in", "out", "g"
	cfg.RetryBackoffMax, cfg.ProduceTimeout = 200*time.Millisecond, 3*time.Second
	if deadLetters {
		cfg.DeadLetterTopic = "dlq"
	}
	if r.w, err = New(cfg, uniqueDeduper{}, keyOf, NopObserver{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if err := r.w.prod.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if r.tc, err = r.w.topicInfo(ctx); err != nil {
		t.Fatal(err)
	}
	r.c = newCommitter(r.gen, "in", 5*time.Millisecond, NopObserver{}, discardSampler())
	go r.c.run()
	t.Cleanup(r.c.close)
	return r
}

// limit sets the max.message.bytes of topic.
func (r *refusalRig) limit(t *testing.T, ctx context.Context, topic string, n int) {
	t.Helper()
	if err := r.cl.SetTopicConfig(ctx, topic, map[string]string{"max.message.bytes": strconv.Itoa(n)}); err != nil {
		t.Fatal(err)
	}
}

// committed returns partition 0's committed offset.
func (r *refusalRig) committed() int64 {
	r.gen.mu.Lock()
	defer r.gen.mu.Unlock()
	return r.gen.best[0]
}

// check compares partition 0 of topic with want.
func (r *refusalRig) check(t *testing.T, ctx context.Context, topic string, want []kafkaio.Record) {
	t.Helper()
	got, err := testbroker.FromFake(r.cl).ReadAll(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	sameMessages(t, topic, got[0], want)
}

// TestRefusedRecordsOwnTheirBytes proves that what a refused record leaves behind does not depend
// on the reader's fetch buffers, and where a batch that ends in skipped records is committed.
// handleBatch gets a batch whose record at offset 13 the output refuses (too large) and whose Next
// is 16. While the partition is blocked (at the output, or at a dead-letter topic that refuses
// the record too), the test reuses the batch's buffers as the reader's next Fetch would, then
// raises the limit: the records written after the block, and the dead letter, must carry the
// bytes fetched, not the reused ones. The input is committed up to 13 while blocked, and to 16
// (b.Next) only once everything was written or dead-lettered.
func TestRefusedRecordsOwnTheirBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		dlq      bool   // with a dead-letter topic
		blocking string // the topic the partition blocks at, if any
	}{
		{"blocked at the output", false, "out"},
		{"blocked at the dead-letter topic", true, "dlq"},
		{"dead-lettered at once", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			limited := []string{"out"}
			if tc.blocking == "dlq" {
				limited = append(limited, "dlq")
			}
			r := newRefusalRig(t, ctx, tc.dlq, limited...)
			b, buf, slab := fetchedBatch(100 << 10)
			want := make([]kafkaio.Record, len(b.Records))
			for i := range b.Records {
				want[i] = ownedMessage(&b.Records[i], 0)
			}
			st := &partitionState{p: 0, next: -1}
			st.hdrSeq = st.hdr.all
			done := make(chan error, 1)
			go func() { done <- r.w.handleBatch(ctx, ctx, r.c, st, r.tc, b) }()

			if tc.blocking != "" {
				waitFor(t, "blocked at 13, committed up to it", func() bool {
					bl := r.w.Blocked()
					return len(bl) == 1 && bl[0].Offset == 13 && bl[0].Topic == tc.blocking && r.committed() == 13
				})
				reuse(buf, slab) // what the reader's next Fetch would do
				r.limit(t, ctx, tc.blocking, 1<<20)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-ctx.Done():
				t.Fatal("the batch was not written after the limit was raised")
			}
			if len(r.w.Blocked()) != 0 {
				t.Errorf("still blocked: %+v", r.w.Blocked())
			}
			waitFor(t, "committed to Next", func() bool { return r.committed() == 16 })
			if tc.dlq {
				r.check(t, ctx, "out", want[:2])
				r.check(t, ctx, "dlq", want[2:])
			} else {
				r.check(t, ctx, "out", want)
			}
		})
	}
}

// sameMessages compares the key, value, headers (the first len(want[i].Headers): a dead letter
// has more) and timestamp of got with want.
func sameMessages(t *testing.T, what string, got, want []kafkaio.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		ok := bytes.Equal(g.Key, w.Key) && bytes.Equal(g.Value, w.Value) && g.Time.Equal(w.Time) && len(g.Headers) >= len(w.Headers)
		for j := 0; ok && j < len(w.Headers); j++ {
			ok = g.Headers[j].Key == w.Headers[j].Key && bytes.Equal(g.Headers[j].Value, w.Headers[j].Value)
		}
		if !ok {
			t.Errorf("%s[%d] = key %.20q value %.20q headers %d, want key %.20q value %.20q (the reader's buffers were reused)",
				what, i, g.Key, g.Value, len(g.Headers), w.Key, w.Value)
		}
	}
}

// waitFor polls cond every 10ms for up to 30s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestDeadLetterMessageOwnsItsBytes checks that a dead letter does not share memory with the
// record it is built from, whose bytes the reader reuses after its next Fetch.
func TestDeadLetterMessageOwnsItsBytes(t *testing.T) {
	b, buf, slab := fetchedBatch(16)
	w := &Worker{cfg: Config{InputTopic: "in"}}
	l := &lane{topic: "out", partition: 0, msgs: b.Records[2:],
		refused: &kafkaio.RefusedError{Topic: "out", Reason: kafkaio.RefusalMessageTooLarge, Err: kafka.MessageSizeTooLarge}}
	m := &b.Records[2]
	want := ownedMessage(m, 0)
	dl := w.deadLetterMessage(0, l, m)
	own := ownedMessage(m, 0)
	reuse(buf, slab)
	for _, got := range []kafkaio.Record{dl, own} {
		sameMessages(t, "copy", []kafkaio.Record{got}, []kafkaio.Record{want})
	}
	if len(dl.Headers) != 1+7 || dl.Headers[1].Key != DeadLetterHeaderError {
		t.Errorf("dead letter headers %+v", dl.Headers)
	}
	if nilKey := ownedMessage(&kafkaio.Record{Value: []byte{}}, 0); nilKey.Key != nil || nilKey.Value == nil {
		t.Errorf("a null key or an empty value changed: %+v", nilKey)
	}
}
