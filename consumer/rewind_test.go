package consumer_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/embedkafka/kfaketest"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rewindDeduper is a mapDeduper that records the Rewind calls and the Processing offsets.
type rewindDeduper struct {
	*mapDeduper
	mu         sync.Mutex
	rewinds    []int64
	processing []int64
}

func (d *rewindDeduper) Rewind(_ int32, next int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rewinds = append(d.rewinds, next)
	d.processing = append(d.processing, -next) // marks where the offsets may go down
}

func (d *rewindDeduper) Processing(_ int32, next int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.processing = append(d.processing, next)
}

func (d *rewindDeduper) calls() (rewinds, processing []int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.rewinds), slices.Clone(d.processing)
}

// TestWorkerRewindsAfterTruncation proves the worker's side of a log truncated under it: after a
// leader election whose new leader says the log of the epoch the worker read ends at 60 (an
// unclean election, answered by hand: kfake never truncates), the worker tells the Deduper
// Rewind(60) before it processes from 60 again, the offsets it hands Processing only go down
// there, the records read again (the same ones here, so their identities are held) are dropped
// as duplicates rather than written twice, and the partition is committed to its end again.
func TestWorkerRewindsAfterTruncation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1, embedkafka.Options{})
	var in []kafkaio.Record
	for i := range 100 {
		in = append(in, kafkaio.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	e.produce(0, in)
	d := &rewindDeduper{mapDeduper: newMapDeduper(false, nil)}
	r := e.start(e.config(), d, keyFuncFor(t, "key"))
	e.waitAllCommitted(20 * time.Second)
	answered := kfaketest.Answer(e.cl.Fake(), kmsg.OffsetForLeaderEpoch, 1, kfaketest.EpochEnd(60))
	if err := kfaketest.NewLeaderEpoch(e.cl.Fake(), e.in, 0); err != nil {
		t.Fatal(err)
	}
	checkRewoundTo60(t, e, r, d, answered, "the worker to rewind and process up to 100 again")
	_, proc := d.calls()
	for i := 1; i < len(proc); i++ {
		if proc[i] >= 0 && proc[i-1] >= 0 && proc[i] <= proc[i-1] {
			t.Errorf("Processing offsets %v go down without a Rewind", proc)
			break
		}
	}
}

// checkRewoundTo60 waits until r, whose Deduper is d, asked the leader once (answered) where the
// log of its epoch ends, was told 60, and processed 100 input records again from there; then it
// stops r and checks that the Deduper heard one Rewind(60), that the output holds the 100
// records once each and that the 40 read again were duplicates.
func checkRewoundTo60(t *testing.T, e *env, r *running, d *rewindDeduper, answered func() int, what string) {
	t.Helper()
	eventually(t, 20*time.Second, what, func() bool {
		_, proc := d.calls()
		i := slices.Index(proc, -60)
		return answered() == 1 && i >= 0 && slices.Contains(proc[i:], 100)
	})
	e.waitAllCommitted(20 * time.Second)
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if rewinds, _ := d.calls(); !slices.Equal(rewinds, []int64{60}) {
		t.Errorf("Rewind calls %v, want [60]", rewinds)
	}
	if got := e.readOut(e.out)[0]; len(got) != 100 {
		t.Errorf("output holds %d records, want the 100 once each", len(got))
	}
	if n := r.obs.duplicates.Load(); n != 40 {
		t.Errorf("%d duplicates, want the 40 records read again", n)
	}
}

// TestWorkerChecksCommittedEpoch proves that a partition's next owner checks the leader epoch
// committed with its offset before its first fetch: the first worker commits offset 100 under
// leader epoch 0 and stops; a leader election follows whose new leader says the log of epoch 0
// ends at 60 (an unclean election, answered by hand: kfake never truncates). The second worker
// asks (OffsetForLeaderEpoch), tells the Deduper Rewind(60), reads from 60 (the same records
// here, held by the restored state, so dropped as duplicates, not written twice) and commits the
// partition to its end again, instead of fetching at 100 as if nothing happened. Under
// exactly-once the epoch comes with the offset committed in the first worker's transactions.
func TestWorkerChecksCommittedEpoch(t *testing.T) {
	t.Parallel()
	eachDelivery(t, 1, 1, checksCommittedEpoch)
}

func checksCommittedEpoch(t *testing.T, e *env, cfg consumer.Config) {
	var in []kafkaio.Record
	for i := range 100 {
		in = append(in, kafkaio.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	e.produce(0, in)
	st := newStore()
	r := e.start(cfg, newMapDeduper(false, st), keyFuncFor(t, "key"))
	e.waitAllCommitted(20 * time.Second)
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	answered := kfaketest.Answer(e.cl.Fake(), kmsg.OffsetForLeaderEpoch, 1, kfaketest.EpochEnd(60))
	if err := kfaketest.NewLeaderEpoch(e.cl.Fake(), e.in, 0); err != nil {
		t.Fatal(err)
	}
	d := &rewindDeduper{mapDeduper: newMapDeduper(false, st)}
	r = e.start(cfg, d, keyFuncFor(t, "key"))
	checkRewoundTo60(t, e, r, d, answered, "the next owner to check the committed epoch, rewind and process up to 100 again")
}
