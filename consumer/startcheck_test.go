package consumer_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFirstGenerationUsesRunsCheck: the worker checks the topics (partition counts, then the
// output's max.message.bytes with a DescribeConfigs request) before it joins; the first
// generation of a join that succeeded at once uses that check instead of repeating it before its
// partitions start.
func TestFirstGenerationUsesRunsCheck(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 2, embedkafka.Options{})
	var describes atomic.Int32
	kc := e.cl.Fake().Kfake()
	kc.ControlKey(int16(kmsg.DescribeConfigs), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		describes.Add(1)
		return nil, nil, false
	})
	r := e.start(e.config(), newMapDeduper(false, nil), keyFuncFor(t, "key"))
	eventually(t, 20*time.Second, "the worker ready with both partitions", func() bool {
		return r.w.Ready() && r.obs.assigned.Load() == 2
	})
	if n := describes.Load(); n != 1 {
		t.Errorf("the topics' limits were read %d times before the first generation's partitions ran, want once (Run's check)", n)
	}
}
