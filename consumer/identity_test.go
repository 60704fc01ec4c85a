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
	"github.com/kdedup/kdedup/identity"
	"github.com/kdedup/kdedup/internal/embedkafka"
)

// TestIdentityRetryHoldsPartition proves the fail-safe contract of identity extraction: while the
// KeyFunc returns retry errors (a schema registry that is down), the partition is held, nothing is
// produced and nothing is counted unkeyed, the Observer hears IdentityHeld and the worker turns
// not ready after Config.IdentityHold; once extraction works again every record is deduplicated,
// in order, and none passed as unkeyed.
func TestIdentityRetryHoldsPartition(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1, embedkafka.Options{})
	in, want := stream("key", 0, 200, rand.New(rand.NewPCG(7, 8)))
	e.produce(0, in)
	var down atomic.Bool
	var refused atomic.Int64
	down.Store(true)
	inner := keyFuncFor(t, "key")
	kf := func(ctx context.Context, k, v []byte, h identity.Headers) ([]byte, identity.Reason, error) {
		if down.Load() && string(k) >= "id-0-100" { // the registry goes down mid-batch
			refused.Add(1)
			return nil, identity.Found, fmt.Errorf("%w: registry down", identity.ErrRetry)
		}
		return inner(ctx, k, v, h)
	}
	cfg := e.config()
	cfg.IdentityHold = 50 * time.Millisecond
	cfg.RetryBackoffMax = 20 * time.Millisecond
	r := e.start(cfg, newMapDeduper(false, nil), kf)
	eventually(t, 20*time.Second, "the partition is held and the worker not ready", func() bool {
		return r.obs.identityHeld.Load() && refused.Load() >= 3 && !r.w.Ready()
	})
	if n := r.obs.unkeyed.Load(); n != 0 {
		t.Fatalf("%d records counted unkeyed while the identity could not be extracted", n)
	}
	if n := r.obs.produced.Load(); n != 0 {
		t.Fatalf("%d records produced while the batch was held", n)
	}
	down.Store(false)
	e.waitAllCommitted(20 * time.Second)
	eventually(t, 10*time.Second, "ready again", r.w.Ready)
	if err := r.stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	compareSeq(t, "output", e.readOut(e.out)[0], want)
	if n := r.obs.unkeyed.Load(); n != 0 {
		t.Errorf("%d records counted unkeyed, want 0", n)
	}
	if r.obs.identityHeld.Load() || r.obs.identityHolds.Load() == 0 {
		t.Errorf("IdentityHeld: %d holds, held now %v; want at least one, released", r.obs.identityHolds.Load(), r.obs.identityHeld.Load())
	}
}

var _ consumer.KeyFunc = (*identity.Extractor)(nil).Extract

// TestOutputReaderPassesRetryErrorsUp proves that a re-warm or rebuild whose KeyFunc cannot
// extract an identity for now (the schema registry is down) fails with that error, so the caller
// retries the assignment, instead of skipping the record and letting its duplicates through.
func TestOutputReaderPassesRetryErrorsUp(t *testing.T) {
	t.Parallel()
	e := newOutputEnv(t)
	inner := keyFuncFor(t, "key")
	var down atomic.Bool
	down.Store(true)
	kf := func(ctx context.Context, k, v []byte, h identity.Headers) ([]byte, identity.Reason, error) {
		if down.Load() && string(k) == "o-3-21" {
			return nil, identity.Found, fmt.Errorf("%w: registry down", identity.ErrRetry)
		}
		return inner(ctx, k, v, h)
	}
	r := consumer.NewOutputReader(e.config(), kf, testLog)
	defer r.Close()
	from := map[int32]int64{3: 0}
	n, err := r.Rewarm(context.Background(), from, func([]byte, time.Time) {})
	if !errors.Is(err, identity.ErrRetry) {
		t.Fatalf("Rewarm = %d, %v; want an error wrapping identity.ErrRetry", n, err)
	}
	if _, err := r.Read(context.Background(), from, nil, func([]byte, time.Time) {}); !errors.Is(err, identity.ErrRetry) {
		t.Fatalf("Read: %v; want an error wrapping identity.ErrRetry", err)
	}
	down.Store(false)
	if n, err := r.Rewarm(context.Background(), from, func([]byte, time.Time) {}); err != nil || n == 0 {
		t.Fatalf("Rewarm after recovery = %d, %v", n, err)
	}
}
