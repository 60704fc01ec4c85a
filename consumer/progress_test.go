package consumer_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// progressKey builds the key of an input record of the progress tests: the identity, the input
// partition and the input offset, so that the Deduper double knows which record Seen is asked
// about and the output can be matched against the input.
func progressKey(id string, p, offset int) []byte {
	return []byte(fmt.Sprintf("%s|%d|%d", id, p, offset))
}

// parseProgressKey splits a key built by progressKey.
func parseProgressKey(key []byte) (id string, p int32, offset int64, err error) {
	parts := bytes.Split(key, []byte("|"))
	if len(parts) != 3 {
		return "", 0, 0, fmt.Errorf("malformed key %q", key)
	}
	pp, err1 := strconv.Atoi(string(parts[1]))
	off, err2 := strconv.ParseInt(string(parts[2]), 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, 0, fmt.Errorf("malformed key %q", key)
	}
	return string(parts[0]), int32(pp), off, nil
}

// progressDeduper is a Deduper double that checks the Processing and Acked
// contract against the records themselves: every Seen must be about a record of the batch the
// last Processing announced, and at every Acked(p, next) each record of p below next that was not
// a duplicate must already be readable from the output topic, and each duplicate from the
// duplicates topic.
type progressDeduper struct {
	*mapDeduper
	cl        *embedkafka.Cluster
	out, dups string

	mu         sync.Mutex
	lower      map[int32]int64 // first offset of the open batch (the previous Processing value)
	processing map[int32]int64 // last Processing value
	acked      map[int32]int64 // last Acked value
	firsts     map[int32][]int64
	dupOffsets map[int32][]int64
	calls      int // Processing calls
	problems   []string
}

func newProgressDeduper(cl *embedkafka.Cluster, out, dups string) *progressDeduper {
	return &progressDeduper{
		mapDeduper: newMapDeduper(false, nil), cl: cl, out: out, dups: dups,
		lower:      map[int32]int64{},
		processing: map[int32]int64{},
		acked:      map[int32]int64{},
		firsts:     map[int32][]int64{},
		dupOffsets: map[int32][]int64{},
	}
}

func (d *progressDeduper) problem(format string, args ...any) {
	d.problems = append(d.problems, fmt.Sprintf(format, args...))
}

func (d *progressDeduper) Processing(p int32, next int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if d.processing[p] != d.acked[p] {
		d.problem("Processing(%d, %d) while the batch up to %d was not acked (acked %d)", p, next, d.processing[p], d.acked[p])
	}
	if next <= d.processing[p] {
		d.problem("Processing(%d, %d) does not advance past %d", p, next, d.processing[p])
	}
	d.lower[p], d.processing[p] = d.processing[p], next
}

func (d *progressDeduper) Seen(p int32, key []byte, ts time.Time) bool {
	id, kp, off, err := parseProgressKey(key)
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case err != nil:
		d.problem("Seen(%d): %v", p, err)
	case kp != p:
		d.problem("Seen(%d) for a record of partition %d", p, kp)
	case off < d.lower[p] || off >= d.processing[p]:
		d.problem("Seen(%d) for offset %d outside the announced batch [%d, %d)", p, off, d.lower[p], d.processing[p])
	case d.processing[p] == d.acked[p]:
		d.problem("Seen(%d) for offset %d after the batch was acked", p, off)
	}
	dup := d.mapDeduper.Seen(p, []byte(id), ts)
	if dup {
		d.dupOffsets[p] = append(d.dupOffsets[p], off)
	} else {
		d.firsts[p] = append(d.firsts[p], off)
	}
	return dup
}

func (d *progressDeduper) Acked(p int32, next int64) {
	d.mu.Lock()
	if next != d.processing[p] {
		d.problem("Acked(%d, %d) but the open batch ends at %d", p, next, d.processing[p])
	}
	var firsts, dups []int64
	for _, o := range d.firsts[p] {
		if o < next {
			firsts = append(firsts, o)
		}
	}
	for _, o := range d.dupOffsets[p] {
		if o < next {
			dups = append(dups, o)
		}
	}
	d.mu.Unlock()

	// Nothing else touches these topics, so what is readable now was acknowledged before Acked.
	missing := func(topic string, partition int, want []int64) string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ends, err := d.cl.EndOffsets(ctx, topic)
		if err != nil {
			return err.Error()
		}
		msgs, err := testbroker.FromFake(d.cl).ReadPartition(ctx, topic, partition, ends[partition])
		if err != nil {
			return err.Error()
		}
		have := map[int64]bool{}
		for _, m := range msgs {
			if _, kp, off, err := parseProgressKey(m.Key); err == nil && kp == p {
				have[off] = true
			}
		}
		for _, o := range want {
			if !have[o] {
				return fmt.Sprintf("input offset %d not in %s/%d", o, topic, partition)
			}
		}
		return ""
	}
	m1 := missing(d.out, int(p), firsts)
	m2 := missing(d.dups, 0, dups)

	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range []string{m1, m2} {
		if m != "" {
			d.problem("Acked(%d, %d): %s", p, next, m)
		}
	}
	d.acked[p] = next
}

// TestProgressTrackerOrdering proves the Processing and Acked contract against a real broker, in both
// modes: Processing(p, next) comes before any Seen of the batch's records and covers exactly
// them, and Acked(p, next) comes only once every record of the batch is readable from the output
// topic (survivors, or every record in mark mode) and the duplicates topic, and before the next
// batch's Processing. At the end everything processed was acknowledged.
func TestProgressTrackerOrdering(t *testing.T) {
	t.Parallel()
	for _, mode := range []consumer.Mode{consumer.ModeDrop, consumer.ModeMark} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			const n = 600
			e := newEnv(t, 2, 2, embedkafka.Options{Topics: map[string]int32{"dups": 1}})
			rng := rand.New(rand.NewPCG(31, 32))
			for p := range 2 {
				var in []kafkaio.Record
				var ids []string
				for i := range n {
					id := fmt.Sprintf("id-%d-%d", p, i)
					if i%4 == 3 {
						id = ids[rng.IntN(len(ids))]
					} else {
						ids = append(ids, id)
					}
					in = append(in, kafkaio.Record{Key: progressKey(id, p, i), Value: []byte(strconv.Itoa(i))})
				}
				e.produce(p, in)
			}
			d := newProgressDeduper(e.cl.Fake(), e.out, "dups")
			cfg := e.config()
			cfg.BatchSize = 50
			cfg.Mode = mode
			cfg.DuplicatesTopic = "dups"
			r := e.start(cfg, d, keyFuncFor(t, "key"))
			e.waitAllCommitted(30 * time.Second)
			if err := r.stop(t, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			d.check(t)
			d.mu.Lock()
			defer d.mu.Unlock()
			for _, p := range d.problems {
				t.Error(p)
			}
			for p := range int32(2) {
				if d.processing[p] != n || d.acked[p] != n {
					t.Errorf("partition %d: last Processing %d, last Acked %d; want %d and %d", p, d.processing[p], d.acked[p], n, n)
				}
				if len(d.firsts[p])+len(d.dupOffsets[p]) != n || len(d.dupOffsets[p]) != n/4 {
					t.Errorf("partition %d: %d firsts, %d duplicates; want %d and %d", p, len(d.firsts[p]), len(d.dupOffsets[p]), n-n/4, n/4)
				}
			}
			if d.calls < 2*n/50 {
				t.Errorf("%d batches, want at least %d", d.calls, 2*n/50)
			}
		})
	}
}

// unackedTracker records the Processing and Acked calls of a gatedDeduper.
type unackedTracker struct {
	*gatedDeduper
	mu         sync.Mutex
	processing int64
	acked      int64
}

func (u *unackedTracker) Processing(_ int32, next int64) {
	u.mu.Lock()
	u.processing = next
	u.mu.Unlock()
}

func (u *unackedTracker) Acked(_ int32, next int64) {
	u.mu.Lock()
	u.acked = next
	u.mu.Unlock()
}

// TestProgressTrackerNoAckWithoutOutput proves that a batch whose output write never succeeds
// (the broker goes down while it is processed) gets Processing but no Acked, and that the
// partition is then released with Discard: a snapshot protocol waiting for Acked never makes such
// a batch durable.
func TestProgressTrackerNoAckWithoutOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1, embedkafka.Options{})
	in, _ := stream("key", 0, 500, rand.New(rand.NewPCG(33, 34)))
	e.produce(0, in)
	md := newMapDeduper(false, nil)
	d := &unackedTracker{gatedDeduper: &gatedDeduper{mapDeduper: md, after: 100, reached: make(chan struct{}), release: make(chan struct{})}}
	cfg := e.config()
	cfg.BatchSize = 50
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.RebalanceTimeout = 10 * time.Second
	r := e.start(cfg, d, keyFuncFor(t, "key"))
	select {
	case <-d.reached:
	case <-time.After(20 * time.Second):
		t.Fatal("worker never got to the gate")
	}
	e.cl.Fake().Stop()
	close(d.release)
	eventually(t, 10*time.Second, "a failed produce", func() bool { return r.obs.produceErrors.Load() > 0 })
	if err := r.stop(t, cfg.ShutdownTimeout+3*time.Second); err != nil {
		t.Fatal(err)
	}
	md.check(t)
	d.mu.Lock()
	processing, acked := d.processing, d.acked
	d.mu.Unlock()
	// The gate holds the Seen of offset 100: the batch holding it was announced and its produce
	// failed, so the last Processing is past 100 and the last Acked is 100 at most.
	if processing <= 100 || acked > 100 {
		t.Errorf("last Processing %d, last Acked %d; want Processing > 100 and Acked <= 100", processing, acked)
	}
	_, revokes, discards := md.counts()
	if discards[0] != 1 || revokes[0] != 0 {
		t.Errorf("%d discards, %d revokes; want 1 discard and no revoke", discards[0], revokes[0])
	}
}
