package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// blockingAssigner is a mapDeduper whose Assign of partition 1 waits until release is closed, as
// a long restore or rebuild from the output topic does; entered is closed when it starts waiting.
type blockingAssigner struct {
	*mapDeduper
	entered, release chan struct{}
}

func (d blockingAssigner) Assign(ctx context.Context, p int32) error {
	if p == 1 {
		close(d.entered)
		select {
		case <-d.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return d.mapDeduper.Assign(ctx, p)
}

// TestNotReadyWhileAssigning proves that the worker stays not ready (/readyz 503) while the state
// of one of its partitions is being prepared, although the other partitions are consumed, and
// becomes ready once it is.
func TestNotReadyWhileAssigning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 2, embedkafka.Options{})
	d := blockingAssigner{newMapDeduper(false, nil), make(chan struct{}), make(chan struct{})}
	r := e.start(e.config(), d, keyFuncFor(t, "key"))
	<-d.entered
	e.produce(0, []kafkaio.Record{record("key", 0, 0, "a")})
	eventually(t, 20*time.Second, "partition 0 consumed", func() bool { return r.obs.consumed.Load() == 1 })
	if r.w.Ready() || r.obs.ready.Load() {
		t.Fatal("worker ready while the state of partition 1 is being prepared")
	}
	close(d.release)
	eventually(t, 20*time.Second, "worker ready", func() bool { return r.w.Ready() && r.obs.ready.Load() })
	d.check(t)
}
