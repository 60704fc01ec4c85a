package app

import (
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// reauthLifetime is the broker's connections.max.reauth.ms in TestReauthenticationEnforced.
const reauthLifetime = 3 * time.Second

// TestReauthenticationEnforced runs the worker over SASL_SSL with SCRAM-SHA-512 against a real
// broker that enforces a session lifetime of 3s (connections.max.reauth.ms=3000: the broker
// closes a connection that sends anything but a re-authentication after its session expired).
// Records flow for about eight lifetimes (25s). It measures and logs what happens: whether the worker
// stays up, how long it takes to commit everything, the connection failures it logged, and what
// was lost or leaked; it passes when the worker caught up with nothing lost or leaked and no
// error logged. kfake advertises a lifetime but never enforces it, so this runs on real Kafka only.
//
// Every connection re-authenticates its session in place before the lifetime ends (KIP-368,
// kafkaio's Conn), so the worker keeps one generation and no connection is closed for expiry.
func TestReauthenticationEnforced(t *testing.T) {
	testbroker.NeedReal(t)
	t.Parallel()
	o := secureOptions{mech: kafkaio.MechanismSCRAM512, user: "dedup", password: "pw-reauth-Zq9"}
	s := secureOn(t, testbroker.Real, o, map[string]string{"connections.max.reauth.ms": "3000"})
	// The restart tests' 1s session is for a fast failover; here a generation that ends must
	// mean a connection lost to its session's expiry, not a heartbeat that a loaded machine's
	// JVM answered after a second. Heartbeats still go out six times per session lifetime.
	s.environ["KAFKA_SESSION_TIMEOUT"], s.environ["KAFKA_HEARTBEAT_INTERVAL"], s.environ["KAFKA_REBALANCE_TIMEOUT"] =
		"10s", "500ms", "10s"
	recs, unique := genStream(rand.New(rand.NewPCG(37, 1)), 25000, 0.25, false)
	began := time.Now()
	done := make(chan error, 1)
	// 100 records every 100ms: about 25s of flow, eight session lifetimes.
	go produceStream(t.Context(), s.cl, recs, 100, 100*time.Millisecond, done)
	w := startWorker(t, s.environ)
	must(t, <-done)
	flowed := time.Since(began)
	var exited bool
	poll(t, 120*time.Second, "every input record committed, or the worker gone", func() (bool, error) {
		select {
		case <-w.exited:
			exited = true
			return true, nil
		default:
		}
		return caughtUp(s.cl), nil
	}, func() string { return tail(w.log(), logTail) })
	caught := time.Since(began)
	if !exited {
		w.signal(t, syscall.SIGTERM)
		w.wait(t, 20*time.Second)
	}
	c := checkOutput(t, s.cl, unique)
	log := w.log()
	var errs, warns, closed, generations int
	for _, e := range parseEvents(log) {
		if e.str("msg") == "generation started" {
			generations++
		}
		switch e.str("level") {
		case "ERROR":
			errs++
		case "WARN":
			warns++
			t.Logf("warning: %s: %s", e.str("msg"), e.str("error"))
		}
		msg := strings.ToLower(e.str("msg") + " " + e.str("error"))
		if strings.Contains(msg, "eof") || strings.Contains(msg, "reset") || strings.Contains(msg, "closed") || strings.Contains(msg, "broken pipe") {
			closed++
		}
	}
	t.Logf("session lifetime %v; records flowed for %v; worker exited: %v (status %d); caught up after %v; "+
		"%d generations, %d errors, %d warnings, %d lines about closed connections; %d of %d distinct lost, %d leaked",
		reauthLifetime, flowed.Round(time.Millisecond), exited, w.code, caught.Round(time.Millisecond),
		generations, errs, warns, closed, c.lost, len(unique), c.leaked)
	if exited || c.lost != 0 || c.leaked != 0 || errs != 0 || generations != 1 || closed != 0 {
		t.Errorf("with enforced re-authentication: worker exited %v, %d lost, %d leaked, %d errors, %d generations (want 1), "+
			"%d lines about closed connections (want 0); log:\n%s",
			exited, c.lost, c.leaked, errs, generations, closed, tail(log, logTail))
	}
}
