package consumer

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// RetryReasons returns every reason Observer.ConnectionRetry can be given
// (kafkaio.RetryReasons).
func RetryReasons() []string { return kafkaio.RetryReasons() }

// connFailures decides whether a connection failure is retried. At startup an authentication,
// TLS or authorization failure (kafkaio.Fatal) is a configuration to fix, and fatal at once.
// Once the worker connected, the same failure is more likely the cluster's passing trouble (a
// broker restarting its listeners, an identity provider slow to rotate credentials, MSK IAM
// throttling the connections of a rebalancing group), so it is retried until it has persisted
// for bound. A throttled connection (kafkaio.Throttled) is always retried. Its methods are safe
// for concurrent use.
type connFailures struct {
	bound     time.Duration
	connected atomic.Bool

	mu    sync.Mutex
	since time.Time // when the current run of failures began; zero when none
}

// ok records that the worker connected.
func (f *connFailures) ok() {
	f.connected.Store(true)
	f.mu.Lock()
	f.since = time.Time{}
	f.mu.Unlock()
}

// retry records the failure err and reports whether it is to be retried (see connFailures).
func (f *connFailures) retry(err error) bool {
	if kafkaio.Throttled(err) {
		return true
	}
	if !kafkaio.Fatal(err) {
		return true
	}
	if !f.connected.Load() {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.since.IsZero() {
		f.since = time.Now()
	}
	return time.Since(f.since) < f.bound
}
