package loadtest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// Hook is an action a run takes once At records were created: restart the worker, let a second
// worker join, inject broker faults.
type Hook struct {
	// Name names the hook in the report (Report.Hooks) and in failures. Default: "hook".
	Name string
	// At is the number of records created before Do is called, in [0, Config.Count].
	At int
	// Do is called in its own goroutine with a context that the end of sending does not cancel.
	Do func(ctx context.Context) error
}

// HookRun is what became of one hook, as reported.
type HookRun struct {
	Name string `json:"name"`
	// At is the hook's record count; StartSeconds when it was called, since the run's start, and
	// Seconds how long it took.
	At           int     `json:"at"`
	StartSeconds float64 `json:"start_s"`
	Seconds      float64 `json:"s"`
	// Error is the error it returned, or empty.
	Error string `json:"error,omitempty"`
}

// hooks returns Config.Hooks and the At/Do hook, sorted by At (stable: hooks with the same At are
// called in the order given, At/Do last).
func (c Config) hooks() []Hook {
	hs := slices.Clone(c.Hooks)
	if c.Do != nil {
		hs = append(hs, Hook{At: c.At, Do: c.Do})
	}
	for i := range hs {
		if hs[i].Name == "" {
			hs[i].Name = "hook"
		}
	}
	slices.SortStableFunc(hs, func(a, b Hook) int { return cmp.Compare(a.At, b.At) })
	return hs
}

// hookRunner calls a run's hooks as the generator creates records and collects what became of
// them. created is called by the generator goroutine only; wait once the generator returned.
type hookRunner struct {
	hooks   []Hook
	next    int // the first hook not called yet
	start   time.Time
	results chan HookRun
}

func newHookRunner(cfg Config, start time.Time) *hookRunner {
	hs := cfg.hooks()
	return &hookRunner{hooks: hs, start: start, results: make(chan HookRun, len(hs))}
}

// created calls, each in its own goroutine, every hook whose At is at most n, the number of
// records created so far.
func (h *hookRunner) created(ctx context.Context, n int) {
	for h.next < len(h.hooks) && h.hooks[h.next].At <= n {
		hk := h.hooks[h.next]
		h.next++
		go func() {
			t0 := time.Now()
			err := hk.Do(context.WithoutCancel(ctx))
			r := HookRun{Name: hk.Name, At: hk.At, StartSeconds: t0.Sub(h.start).Seconds(), Seconds: time.Since(t0).Seconds()}
			if err != nil {
				r.Error = err.Error()
			}
			h.results <- r
		}()
	}
}

// wait waits for every hook that was called and returns what became of them, in the order they
// were called.
func (h *hookRunner) wait() []HookRun {
	runs := make([]HookRun, 0, h.next)
	for range h.next {
		runs = append(runs, <-h.results)
	}
	slices.SortStableFunc(runs, func(a, b HookRun) int { return cmp.Compare(a.StartSeconds, b.StartSeconds) })
	return runs
}

// failure describes a hook that failed, for Report.Failures.
func (r HookRun) failure() string {
	if r.Name == "hook" {
		return fmt.Sprintf("the hook at record %d failed: %s", r.At, r.Error)
	}
	return fmt.Sprintf("the hook %q at record %d failed: %s", r.Name, r.At, r.Error)
}
