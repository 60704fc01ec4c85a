package kafkaio

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Sampler logs at most one line per key per interval and reports how many lines it suppressed in
// between, so that a failure retried many times a second logs one line per interval. It is safe
// for concurrent use.
type Sampler struct {
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

// NewSampler returns a Sampler that logs to log (nil: nowhere) at most once per key every every.
func NewSampler(log *slog.Logger, every time.Duration) *Sampler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sampler{log: log, every: every, now: time.Now, state: make(map[string]*sampleState)}
}

// Log logs msg with attrs at level unless a line with the same key was logged less than the
// sampling interval ago. It reports whether it logged.
func (s *Sampler) Log(level slog.Level, key, msg string, attrs ...any) bool {
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
