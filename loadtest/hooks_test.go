package loadtest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestHookRunner checks that hooks are called once their record count is reached, each once, and
// that what became of them is reported, with the failures of those that failed.
func TestHookRunner(t *testing.T) {
	calls := make(chan string, 10)
	do := func(name string, err error) func(context.Context) error {
		return func(context.Context) error {
			calls <- name
			return err
		}
	}
	cfg := Config{
		Hooks: []Hook{
			{Name: "leave", At: 30, Do: do("leave", nil)},
			{Name: "join", At: 10, Do: do("join", nil)},
			{Name: "faults", At: 30, Do: do("faults", errors.New("no broker"))},
			{Name: "never", At: 100, Do: do("never", nil)},
		},
		At: 20, Do: do("restart", nil),
	}
	h := newHookRunner(cfg, time.Now())
	steps := []struct {
		created int
		want    []string // the hooks this step calls, sorted
	}{
		{0, nil},
		{9, nil},
		{10, []string{"join"}},
		{25, []string{"restart"}},
		{31, []string{"faults", "leave"}},
		{31, nil},
	}
	for _, st := range steps {
		h.created(context.Background(), st.created)
		var got []string
		for range st.want {
			select {
			case name := <-calls:
				got = append(got, name)
			case <-time.After(10 * time.Second):
				t.Fatalf("after %d records: hooks %v called, want %v", st.created, got, st.want)
			}
		}
		if slices.Sort(got); !slices.Equal(got, st.want) {
			t.Errorf("after %d records: called %v, want %v", st.created, got, st.want)
		}
	}
	runs := h.wait()
	if len(runs) != 4 || len(calls) != 0 {
		t.Fatalf("%d runs reported, %d further calls; want 4 and none: %+v", len(runs), len(calls), runs)
	}
	var failures []string
	for _, r := range runs {
		if r.Error != "" {
			failures = append(failures, r.failure())
		}
	}
	if len(failures) != 1 || !strings.Contains(failures[0], `the hook "faults" at record 30 failed: no broker`) {
		t.Errorf("failures %q", failures)
	}
	if hs := cfg.hooks(); hs[1].Name != "hook" || hs[1].At != 20 {
		t.Errorf("Config.Do is not the unnamed hook at record 20: %+v", hs)
	}
}
