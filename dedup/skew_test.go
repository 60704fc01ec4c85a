package dedup

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/window"
)

// aheadPersister restores snapshots as if their saver's clock ran ahead by ahead.
type aheadPersister struct {
	Persister
	ahead time.Duration
}

func (p aheadPersister) Restore(ctx context.Context, unit string, cfg window.Config) (*window.Filter, Restored, error) {
	f, r, err := p.Persister.Restore(ctx, unit, cfg)
	if !r.Created.IsZero() {
		r.Created = r.Created.Add(p.ahead)
	}
	return f, r, err
}

// TestRestoreReportsClockSkew: a restore compares the snapshot's creation time with the local
// clock, exports how far it lies ahead, and logs it beyond ClockSkewBound.
func TestRestoreReportsClockSkew(t *testing.T) {
	for _, tc := range []struct {
		ahead time.Duration
		warns bool
	}{
		{0, false},
		{time.Minute, true},
	} {
		ctx := context.Background()
		p, _ := dirPersister(t)
		saver, err := NewSet(ctx, Config{Window: testWindow(), Topic: "orders", Persister: p, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := saver.Assign(ctx, 0); err != nil { // the baseline snapshot
			t.Fatal(err)
		}
		saver.Close(ctx)
		obs := &recordingObserver{}
		var logs bytes.Buffer
		s, err := NewSet(ctx, Config{Window: testWindow(), Topic: "orders", Persister: aheadPersister{p, tc.ahead},
			Observer: obs, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Assign(ctx, 0); err != nil {
			t.Fatal(err)
		}
		s.Close(ctx)
		if len(obs.skews) != 1 || obs.skews[0] < tc.ahead-10*time.Second || obs.skews[0] > tc.ahead {
			t.Errorf("ahead %v: skews reported %v", tc.ahead, obs.skews)
		}
		if warned := strings.Contains(logs.String(), "clocks disagree"); warned != tc.warns {
			t.Errorf("ahead %v: warned %v, want %v:\n%s", tc.ahead, warned, tc.warns, logs.String())
		}
	}
}
