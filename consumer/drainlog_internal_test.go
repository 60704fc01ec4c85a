package consumer

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestRunLogsDrainBeforeReturning proves that Run has logged that it drains by the time it
// returns, however fast it stops: the line is logged from the context's AfterFunc, and a process
// that exits once Run returned lost it (a SIGTERM that stopped the worker in 41 ms).
func TestRunLogsDrainBeforeReturning(t *testing.T) {
	for i := range 20 {
		var logs bytes.Buffer // Run returns after its last write: the test reads it alone
		cfg := AppDefaults()
		cfg.Brokers, cfg.InputTopic, cfg.OutputTopic, cfg.GroupID = []string{"127.0.0.1:1"}, "in", "out", "g"
		w, err := New(cfg, uniqueDeduper{}, keyOf, NopObserver{}, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // stopped before it started: Run returns at once
		if err := w.Run(ctx); err != nil {
			t.Fatalf("Run with its context ended: %v", err)
		}
		if !strings.Contains(logs.String(), "shutdown requested: draining") {
			t.Fatalf("run %d: Run returned before logging that it drains; log:\n%s", i, logs.String())
		}
	}
}
