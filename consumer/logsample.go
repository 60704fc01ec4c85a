package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// sampler logs at most one line per key per interval and reports how many lines it suppressed in
// between. It is safe for concurrent use.
type sampler struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	state map[string]*sampleState
}

type sampleState struct {
	last       time.Time
	suppressed int
}

func newSampler(log *slog.Logger, every time.Duration) *sampler {
	return &sampler{log: log, every: every, now: time.Now, state: make(map[string]*sampleState)}
}

// Log logs msg with attrs at level unless a line with the same key was logged less than the
// sampling interval ago. It reports whether it logged.
func (s *sampler) Log(level slog.Level, key, msg string, attrs ...any) bool {
	if !s.log.Enabled(context.Background(), level) {
		return false
	}
	now := s.now()
	s.mu.Lock()
	st := s.state[key]
	if st == nil {
		if len(s.state) > 1024 { // keys come from format strings, but stay bounded regardless
			clear(s.state)
		}
		st = &sampleState{}
		s.state[key] = st
	} else if now.Sub(st.last) < s.every {
		st.suppressed++
		s.mu.Unlock()
		return false
	}
	suppressed := st.suppressed
	st.last, st.suppressed = now, 0
	s.mu.Unlock()
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed_since_last", suppressed))
	}
	s.log.Log(context.Background(), level, msg, attrs...)
	return true
}

// kafkaLoggers returns the loggers handed to kafka-go: its chatty informational log goes to
// debug level, its error log to a sampled warning keyed by the format string, so an outage logs
// one line per kind of problem per sampling interval instead of one per retry.
func kafkaLoggers(log *slog.Logger, s *sampler, component string) (info, errs kafka.Logger) {
	info = kafka.LoggerFunc(func(format string, args ...any) {
		if log.Enabled(context.Background(), slog.LevelDebug) {
			log.Debug(fmt.Sprintf(format, args...), "component", component)
		}
	})
	errs = kafka.LoggerFunc(func(format string, args ...any) {
		s.Log(slog.LevelWarn, component+":"+format, fmt.Sprintf(format, args...), "component", component)
	})
	return info, errs
}
