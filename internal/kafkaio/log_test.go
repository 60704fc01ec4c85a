package kafkaio

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestSampler(t *testing.T) {
	var buf bytes.Buffer
	s := NewSampler(slog.New(slog.NewTextHandler(&buf, nil)), 10*time.Second)
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	steps := []struct {
		advance time.Duration
		key     string
		logged  bool
	}{
		{0, "a", true},
		{time.Second, "a", false},
		{time.Second, "b", true},
		{5 * time.Second, "a", false},
		{3 * time.Second, "a", true}, // 10s after the first "a"
		{0, "a", false},
	}
	for i, st := range steps {
		now = now.Add(st.advance)
		if got := s.Log(slog.LevelWarn, st.key, "msg-"+st.key); got != st.logged {
			t.Errorf("step %d: logged=%v, want %v", i, got, st.logged)
		}
	}
	if !strings.Contains(buf.String(), "suppressed_since_last=2") {
		t.Errorf("log does not report the 2 suppressed lines:\n%s", buf.String())
	}
	// Disabled levels are not logged and not counted.
	quiet := NewSampler(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError})), time.Second)
	if quiet.Log(slog.LevelWarn, "x", "m") {
		t.Error("logged below the handler's level")
	}
}
