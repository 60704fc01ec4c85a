package loadrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/loadtest"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// faultSpec is one -fault-at: once the fraction at of the records was sent, the embedded broker
// answers count of the worker's produce requests to the output topic with err.
type faultSpec struct {
	at    float64
	err   *kerr.Error
	count int
}

// faultWait bounds how long a -fault-at hook waits for its produce requests.
const faultWait = 30 * time.Second

// parseFault parses -fault-at FRACTION:ERROR[:COUNT], ERROR being a Kafka error name such as
// REQUEST_TIMED_OUT (any case).
func parseFault(s string) (faultSpec, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return faultSpec{}, fmt.Errorf("-fault-at %q is not FRACTION:ERROR[:COUNT]", s)
	}
	f := faultSpec{count: 1}
	var err error
	if f.at, err = strconv.ParseFloat(parts[0], 64); err != nil || !(f.at > 0 && f.at < 1) {
		return f, fmt.Errorf("-fault-at %q: the fraction must be between 0 and 1", s)
	}
	if f.err = kafkaError(parts[1]); f.err == nil {
		return f, fmt.Errorf("-fault-at %q: %q is not a Kafka error name (such as REQUEST_TIMED_OUT)", s, parts[1])
	}
	if len(parts) == 3 {
		if f.count, err = strconv.Atoi(parts[2]); err != nil || f.count < 1 {
			return f, fmt.Errorf("-fault-at %q: the count must be a positive integer", s)
		}
	}
	return f, nil
}

// kafkaError returns the Kafka error with the given name (case-insensitive), or nil.
func kafkaError(name string) *kerr.Error {
	for code := int16(1); code < 256; code++ {
		if e := kerr.TypedErrorForCode(code); e != nil && e.Code == code && strings.EqualFold(e.Message, name) {
			return e
		}
	}
	return nil
}

// checkHooks checks -join-at, -leave-at, -rebuild-at and -fault-at: embedded mode with the worker
// only, fractions between 0 and 1, the second worker leaving after it joined.
func (f *loadtestFlags) checkHooks(isEmbedded bool) error {
	if f.joinAt == 0 && f.leaveAt == 0 && f.rebuildAt == 0 && len(f.faultAt) == 0 {
		return nil
	}
	if !isEmbedded || f.passthrough || f.preload {
		return errors.New("-join-at, -leave-at, -rebuild-at and -fault-at need the embedded mode with the worker (not -passthrough or -preload)")
	}
	for _, v := range []float64{f.joinAt, f.leaveAt, f.rebuildAt} {
		if v < 0 || v >= 1 {
			return errors.New("-join-at, -leave-at and -rebuild-at must be between 0 and 1")
		}
	}
	if f.leaveAt != 0 && (f.joinAt == 0 || f.leaveAt <= f.joinAt) {
		return errors.New("-leave-at needs a smaller -join-at: the second worker leaves after it joined")
	}
	for _, s := range f.faultAt {
		fs, err := parseFault(s)
		if err != nil {
			return err
		}
		f.faults = append(f.faults, fs)
	}
	return nil
}

// hookSet builds the hooks of an embedded run (-join-at, -leave-at, -rebuild-at, -fault-at) and
// reports what they did.
type hookSet struct {
	w      *embeddedWorker // the worker under test
	second *embeddedWorker // the worker of -join-at, nil without one
	joined chan struct{}   // closed when the join hook has returned
	cl     *embedkafka.Cluster
	lt     loadtest.Config

	mu     sync.Mutex // hooks run concurrently
	left   bool       // the second worker left
	notes  []string
	faults []*kfake.FaultHandle
}

// note adds a line to the report's notes.
func (hs *hookSet) note(format string, a ...any) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.notes = append(hs.notes, fmt.Sprintf(format, a...))
}

// embeddedHooks returns the hooks of o against the worker w and the cluster cl. The returned
// hookSet's finish stops the second worker (if it is still running) and adds notes to the report.
func embeddedHooks(w *embeddedWorker, cl *embedkafka.Cluster, lt loadtest.Config, o embeddedOptions, stderr io.Writer) ([]loadtest.Hook, *hookSet) {
	hs := &hookSet{w: w, cl: cl, lt: lt}
	at := func(frac float64) int { return int(frac * float64(lt.Count)) }
	var hooks []loadtest.Hook
	if o.joinAt > 0 {
		cfg := w.cfg
		cfg.HTTPAddr = "127.0.0.1:0"
		hs.second = newEmbeddedWorker(w.outer, cfg, lt, nil, embeddedOptions{verbose: o.verbose}, stderr)
		hs.second.what = "the second worker"
		hs.joined = make(chan struct{})
		hooks = append(hooks, loadtest.Hook{Name: "join", At: at(o.joinAt), Do: hs.join})
	}
	if o.leaveAt > 0 {
		hooks = append(hooks, loadtest.Hook{Name: "leave", At: at(o.leaveAt), Do: hs.leave})
	}
	if o.rebuildAt > 0 {
		hooks = append(hooks, loadtest.Hook{Name: "rebuild", At: at(o.rebuildAt), Do: hs.rebuild})
	}
	for _, f := range o.faults {
		hooks = append(hooks, loadtest.Hook{Name: "fault " + f.err.Message, At: at(f.at), Do: hs.fault(f)})
	}
	return hooks, hs
}

// join starts the second worker and waits until it is ready (see embeddedWorker.start).
func (hs *hookSet) join(ctx context.Context) error {
	defer close(hs.joined)
	return hs.second.start(ctx)
}

// leave stops the second worker gracefully: it leaves the consumer group after releasing its
// partitions. Hooks run concurrently, so it first waits for the join to end: a second worker
// still joining (a slow rebalance) leaves once it is ready, instead of being stopped under the
// join, which would then wait for a readiness that never comes.
func (hs *hookSet) leave(ctx context.Context) error {
	select {
	case <-hs.joined:
	case <-ctx.Done():
		return ctx.Err()
	}
	hs.mu.Lock()
	hs.left = true
	hs.mu.Unlock()
	code, err := hs.second.halt()
	switch {
	case err != nil:
		return fmt.Errorf("the second worker %w", err)
	case code != 0:
		return fmt.Errorf("the second worker exited with status %d", code)
	}
	return nil
}

// rebuild restarts the worker gracefully with its checkpoint store (CHECKPOINT_DIR) emptied while
// it is down, so that the new worker finds no snapshot and rebuilds its filters from the output
// topic (with CHECKPOINT_REBUILD_MAX_RECORDS above 0, the default).
func (hs *hookSet) rebuild(ctx context.Context) error {
	dir := hs.w.cfg.Checkpoint.Dir
	stop, start, err := hs.w.cycle(ctx, func() error { return emptyDir(dir) })
	if err != nil {
		return err
	}
	hs.note("the worker was restarted with an empty checkpoint store: stopping it took %v, starting the new one until ready (rebuild from the output topic, join) %v",
		stop.Round(time.Millisecond), start.Round(time.Millisecond))
	return nil
}

// emptyDir removes everything in dir; a dir that does not exist is empty.
func emptyDir(dir string) error {
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// fault returns the hook of a -fault-at: it makes the broker answer f.count of the produce
// requests to the output topic with f.err, and waits (at most faultWait) until it did.
func (hs *hookSet) fault(f faultSpec) func(context.Context) error {
	return func(ctx context.Context) error {
		h := hs.cl.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: hs.lt.OutputTopic, Err: f.err, Count: f.count})
		if h == nil {
			return errors.New("the embedded broker is not running")
		}
		hs.mu.Lock()
		hs.faults = append(hs.faults, h)
		hs.mu.Unlock()
		wctx, cancel := context.WithTimeout(ctx, faultWait)
		defer cancel()
		if err := h.Wait(wctx, f.count); err != nil {
			return fmt.Errorf("the broker answered %d of %d produce requests to %s with %s within %v", h.Hits(), f.count, hs.lt.OutputTopic, f.err.Message, faultWait)
		}
		hs.note("the broker answered %d produce requests to %s with %s", h.Hits(), hs.lt.OutputTopic, f.err.Message)
		return nil
	}
}

// finish stops the second worker if it still runs, removes the faults and adds the hooks' notes
// to the report.
func (hs *hookSet) finish(report *loadtest.Report) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	for _, h := range hs.faults {
		h.Remove()
	}
	if hs.second != nil && hs.second.started && !hs.left {
		if code, err := hs.second.halt(); report != nil && (err != nil || code != 0) {
			report.AddFailure(fmt.Sprintf("the second worker did not stop cleanly (status %d, %v)", code, err))
		}
	}
	if report != nil {
		report.Notes = append(report.Notes, hs.notes...)
	}
}
