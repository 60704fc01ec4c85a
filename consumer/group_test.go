package consumer_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/embedkafka/kfaketest"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// TestCommitsCarryLeaderEpoch proves that the worker's offset commits (OffsetCommit, or
// TxnOffsetCommit under exactly-once) carry the leader epoch of the last record before the
// committed offset (KIP-320): partition 1's leader was elected twice more before its records
// were written, partition 0's never.
func TestCommitsCarryLeaderEpoch(t *testing.T) {
	t.Parallel()
	eachDelivery(t, 2, 2, commitsCarryLeaderEpoch)
}

// eachDelivery runs f in parallel subtests, one per delivery mode, each on an env of in input and
// out output partitions, with its Worker config in that mode.
func eachDelivery(t *testing.T, in, out int, f func(t *testing.T, e *env, cfg consumer.Config)) {
	for _, delivery := range []consumer.Delivery{consumer.DeliveryAtLeastOnce, consumer.DeliveryExactlyOnce} {
		t.Run(string(delivery), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, in, out, embedkafka.Options{})
			cfg := e.config()
			if delivery == consumer.DeliveryExactlyOnce {
				cfg = e.eosConfig()
			}
			f(t, e, cfg)
		})
	}
}

func commitsCarryLeaderEpoch(t *testing.T, e *env, cfg consumer.Config) {
	for range 2 {
		if err := kfaketest.NewLeaderEpoch(e.cl.Fake(), e.in, 1); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(3, 7))
	for p := range 2 {
		in, _ := stream("key", p, 50, rng)
		e.produce(p, in)
	}
	r := e.start(cfg, newMapDeduper(false, newStore()), keyFuncFor(t, "key"))
	e.waitAllCommitted(20 * time.Second)
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	m := kafkaio.NewGroupMember(kafkaio.Conn{Brokers: e.cl.Addrs()}.Client(10*time.Second), kafkaio.GroupConfig{
		Group: e.group, Topic: e.in, SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second})
	got, err := m.Fetch(context.Background(), []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]kafkaio.Committed{0: {Offset: 50, LeaderEpoch: 0}, 1: {Offset: 50, LeaderEpoch: 2}}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("partition %d committed %+v, want %+v", p, got[p], w)
		}
	}
}
