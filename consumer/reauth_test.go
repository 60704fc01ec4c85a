package consumer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/twmb/franz-go/pkg/kfake"
)

// readyTimer is a countingObserver that also adds up the time the worker was not ready after it
// first was.
type readyTimer struct {
	*countingObserver
	mu       sync.Mutex
	ready    bool
	once     bool          // it was ready once
	since    time.Time     // when it last stopped being ready
	notReady time.Duration // in total, after it was ready once
	drops    int           // how often it stopped being ready
}

func (o *readyTimer) SetReady(r bool) {
	o.countingObserver.SetReady(r)
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case r && !o.ready && o.once:
		o.notReady += time.Since(o.since)
	case !r && o.ready:
		o.since = time.Now()
		o.drops++
	}
	o.ready, o.once = r, o.once || r
}

// total returns the time not ready after the first ready, and how often it stopped being ready.
func (o *readyTimer) total() (time.Duration, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.notReady
	if !o.ready && o.once {
		d += time.Since(o.since)
	}
	return d, o.drops
}

// TestReauthenticationRun runs the worker for 25s of input through a broker that requires
// SCRAM-SHA-512 and closes every connection whose 3s session expired (testbroker.SessionExpiry,
// as a real broker with connections.max.reauth.ms=3000 does). Every connection re-authenticates
// in place (the group coordinator's, fetch, produce, metadata), so nothing is lost or leaked, the
// group never rebalances after the first assignment, the worker is not ready for at most 1s in
// total, and no connection is closed for expiry.
func TestReauthenticationRun(t *testing.T) {
	t.Parallel()
	const lifetime, run, parts = 3 * time.Second, 25 * time.Second, 4
	exp := testbroker.NewSessionExpiry(lifetime)
	mech, err := kafkaio.NewSASL(kafkaio.SASLConfig{Mechanism: kafkaio.MechanismSCRAM512, Username: "svc", Password: "pw-reauth-Zq9"})
	if err != nil {
		t.Fatal(err)
	}
	listen := append([]kfake.Opt{kfake.EnableSASL(), kfake.Superuser(kafkaio.MechanismSCRAM512, "svc", "pw-reauth-Zq9")}, exp.Opts()...)
	e := newEnv(t, parts, parts, embedkafka.Options{Security: &embedkafka.Security{Listen: listen, Client: kafkaio.Conn{SASL: mech}}})
	cfg := e.config()
	if cfg.SASL, err = consumer.NewSASL(consumer.SASLConfig{Mechanism: kafkaio.MechanismSCRAM512, Username: "svc", Password: "pw-reauth-Zq9"}); err != nil {
		t.Fatal(err)
	}
	cfg.SessionTimeout, cfg.RebalanceTimeout = 6*time.Second, 6*time.Second

	const perTick, tick = 4, 40 * time.Millisecond
	n := int(run/tick) * perTick
	rng := rand.New(rand.NewPCG(37, 2))
	ins, want := map[int][]kafkaio.Record{}, map[int][]kafkaio.Record{}
	for p := range parts {
		ins[p], want[p] = stream("key", p, n, rng)
	}
	obs := &readyTimer{countingObserver: &countingObserver{}}
	w, err := consumer.New(cfg, newMapDeduper(false, newStore()), keyFuncFor(t, "key"), obs, testLog)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, 20*time.Second, "worker ready with every partition", func() bool { return w.Ready() && obs.assigned.Load() == parts })

	began := time.Now()
	ticker := time.NewTicker(tick)
	for i := 0; i < n; i += perTick {
		for p := range parts {
			e.produce(p, ins[p][i:i+perTick])
		}
		<-ticker.C
	}
	ticker.Stop()
	e.waitAllCommitted(30 * time.Second)
	flowed := time.Since(began)
	notReady, drops := obs.total() // before the shutdown, which makes the worker not ready
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil
	got := e.readOut(e.out)
	for p := range parts {
		compareSeq(t, fmt.Sprintf("partition %d", p), got[p], want[p])
	}
	t.Logf("%v of input in %v (session lifetime %v): %d generations, not ready %v in %d drops, %d connections accepted, "+
		"%d closed for expiry, %d re-authentications",
		run, flowed.Round(time.Millisecond), lifetime, obs.rebalances.Load(), notReady.Round(time.Millisecond), drops,
		exp.Accepted(), exp.Expired(), exp.Reauthenticated())
	if g := obs.rebalances.Load(); g != 1 || notReady > time.Second || exp.Expired() != 0 || exp.Reauthenticated() == 0 {
		t.Errorf("%d generations (want 1), not ready for %v (want at most 1s), %d connections closed for expiry (want 0), "+
			"%d re-authentications (want some)", g, notReady, exp.Expired(), exp.Reauthenticated())
	}
}
