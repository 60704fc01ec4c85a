package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/embedkafka/kfaketest"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// armedObserver is a countingObserver that, once armed, calls onEnd when a generation of its
// worker ends (Assigned(0)), or onStart when one starts (Rebalance, before the worker checks its
// connection and topics for the generation).
type armedObserver struct {
	*countingObserver
	armed          atomic.Bool
	onEnd, onStart func()
}

func (o *armedObserver) Assigned(n int) {
	o.countingObserver.Assigned(n)
	if n == 0 && o.onEnd != nil && o.armed.CompareAndSwap(true, false) {
		o.onEnd()
	}
}

func (o *armedObserver) Rebalance() {
	o.countingObserver.Rebalance()
	if o.onStart != nil && o.armed.CompareAndSwap(true, false) {
		o.onStart()
	}
}

// saslEnv returns an env whose broker requires SASL PLAIN, a config that authenticates to it,
// and a switch: set(true) makes the broker refuse every SaslAuthenticate with message until
// set(false).
func saslEnv(t *testing.T, parts int, message string) (*env, consumer.Config, func(bool)) {
	t.Helper()
	mech, err := kafkaio.NewSASL(kafkaio.SASLConfig{Mechanism: kafkaio.MechanismPlain, Username: "svc", Password: "pw-Zq9"})
	if err != nil {
		t.Fatal(err)
	}
	listen := []kfake.Opt{kfake.EnableSASL(), kfake.Superuser(kafkaio.MechanismPlain, "svc", "pw-Zq9")}
	e := newEnv(t, parts, parts, embedkafka.Options{Security: &embedkafka.Security{Listen: listen, Client: kafkaio.Conn{SASL: mech}}})
	cfg := e.config()
	if cfg.SASL, err = consumer.NewSASL(consumer.SASLConfig{Mechanism: kafkaio.MechanismPlain, Username: "svc", Password: "pw-Zq9"}); err != nil {
		t.Fatal(err)
	}
	var on atomic.Bool
	set := func(refuse bool) {
		if !on.Swap(refuse) && refuse {
			// The first request answered as usual (once on is false) drops the answer.
			kfaketest.Answer(e.cl.Fake(), kmsg.SASLAuthenticate, 1<<30, func(req kmsg.Request) kmsg.Response {
				if !on.Load() {
					return nil
				}
				res := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
				res.ErrorCode = kerr.SaslAuthenticationFailed.Code
				res.ErrorMessage = &message
				return res
			})
		}
	}
	return e, cfg, set
}

// runResult is what a worker's Run returned: err, once done is closed.
type runResult struct {
	done chan struct{}
	err  error
}

// startObserved starts a worker reporting to obs, stopped at the end of the test.
func startObserved(t *testing.T, cfg consumer.Config, obs consumer.Observer) (*consumer.Worker, *runResult) {
	t.Helper()
	w, err := consumer.New(cfg, newMapDeduper(false, newStore()), keyFuncFor(t, "key"), obs, testLog)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runResult{done: make(chan struct{})}
	go func() { r.err = w.Run(ctx); close(r.done) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return w, r
}

// exited reports whether the worker ended.
func (r *runResult) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// TestThrottledAfterRebalance: a broker that answers "Too many connects" to every new
// connection's authentication right after a rebalance (from the start of the new generation,
// when the worker checks its connection again) (as MSK with IAM does when a group's
// members all reconnect at once) does not end the worker, which once failed on it: it retries,
// counts the retries, and both members resume the partitions when the throttling ends; nothing
// is lost or leaked.
func TestThrottledAfterRebalance(t *testing.T) {
	t.Parallel()
	const parts = 4
	e, cfg, throttle := saslEnv(t, parts, "Too many connects")
	obsA := &armedObserver{countingObserver: &countingObserver{}, onStart: func() { throttle(true) }}
	a, doneA := startObserved(t, cfg, obsA)
	eventually(t, 20*time.Second, "worker A ready", func() bool { return a.Ready() && obsA.assigned.Load() == parts })
	obsA.armed.Store(true)
	b := e.start(cfg, newMapDeduper(false, newStore()), keyFuncFor(t, "key"))
	eventually(t, 30*time.Second, "A throttled after the rebalance, or gone", func() bool {
		return obsA.connRetries.Load() >= 3 || doneA.exited()
	})
	throttle(false)
	eventually(t, 30*time.Second, "both workers resumed the partitions, or A gone", func() bool {
		return doneA.exited() || a.Ready() && b.w.Ready() && obsA.assigned.Load()+b.obs.assigned.Load() == parts
	})
	if doneA.exited() {
		t.Fatalf("worker A exited: %v", doneA.err)
	}
	rng := rand.New(rand.NewPCG(36, 7))
	want := map[int][]kafkaio.Record{}
	for p := range parts {
		var in []kafkaio.Record
		in, want[p] = stream("key", p, 200, rng)
		e.produce(p, in)
	}
	e.waitAllCommitted(30 * time.Second)
	got := e.readOut(e.out)
	for p := range parts {
		compareSeq(t, fmt.Sprintf("partition %d", p), got[p], want[p])
	}
	t.Logf("worker A retried %d throttled connections", obsA.connRetries.Load())
}

// TestAuthFailurePersists: an authentication failure after the worker had connected is retried,
// and ends the worker, named, once it persisted for the rebalance timeout.
func TestAuthFailurePersists(t *testing.T) {
	t.Parallel()
	e, cfg, refuse := saslEnv(t, 2, "Authentication failed: Invalid username or password")
	var began atomic.Int64
	// From the start of the generation the second worker's join makes (A then checks its
	// connection again, whichever protocol keeps its partitions meanwhile).
	obsA := &armedObserver{countingObserver: &countingObserver{}, onStart: func() {
		began.Store(time.Now().UnixNano())
		refuse(true)
	}}
	a, doneA := startObserved(t, cfg, obsA)
	eventually(t, 20*time.Second, "worker A ready", a.Ready)
	obsA.armed.Store(true)
	e.start(cfg, newMapDeduper(false, newStore()), keyFuncFor(t, "key"))
	select {
	case <-doneA.done:
	case <-time.After(cfg.RebalanceTimeout + 30*time.Second):
		t.Fatal("worker A did not end while its authentication kept failing")
	}
	err := doneA.err
	took := time.Since(time.Unix(0, began.Load()))
	if !errors.Is(err, kafkaio.ErrAuthentication) || obsA.connRetries.Load() == 0 || took < cfg.RebalanceTimeout {
		t.Errorf("A ended after %v with %v, having retried %d times; want an authentication failure after retries "+
			"for at least the rebalance timeout (%v)", took, err, obsA.connRetries.Load(), cfg.RebalanceTimeout)
	}
}
