package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Backoff is the retry policy of kdedup's Kafka I/O: exponential backoff with jitter, like
// franz-go's default RetryBackoffFn. The delay before retry attempt a (0 for the first retry) is
// Min·2^a times a random factor in [0.8, 1.2), capped at Max. Jitter keeps replicas that failed
// together from retrying in lockstep. The zero value uses the defaults. A Backoff is a plain value
// and safe for concurrent use if Rand is.
type Backoff struct {
	// Min is the nominal delay before the first retry. Default: 100ms.
	Min time.Duration
	// Max caps every delay. Default: 5s.
	Max time.Duration
	// Rand returns a number in [0, 1) that picks the jitter. Tests set it to make delays
	// deterministic. Default: math/rand/v2.Float64, which is safe for concurrent use.
	Rand func() float64
}

// Delay returns how long to wait before retry attempt (0 for the first retry). A negative attempt
// counts as 0.
func (b Backoff) Delay(attempt int) time.Duration {
	lo, hi := b.bounds()
	d := lo
	for i := 0; i < attempt && d < hi; i++ {
		d *= 2
	}
	r := rand.Float64
	if b.Rand != nil {
		r = b.Rand
	}
	return min(time.Duration(float64(d)*(0.8+0.4*r())), hi)
}

// bounds returns Min and Max with their defaults.
func (b Backoff) bounds() (lo, hi time.Duration) {
	lo, hi = b.Min, b.Max
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi <= 0 {
		hi = 5 * time.Second
	}
	return lo, hi
}

// Retry calls op with attempt 0, 1, 2, … until it returns nil, attempts calls failed (attempts <= 0
// means no limit), op returned a Permanent error, or ctx ends, and sleeps Delay(attempt) after each
// failure. It returns nil once op succeeds; op's last error when the attempts ran out; the error
// Permanent was given; and, when ctx ended first, an error wrapping op's last error and
// ctx.Err(). op runs on the calling goroutine; it may log its failure, but should check ctx.Err()
// first if a cancelled call must stay quiet.
func (b Backoff) Retry(ctx context.Context, attempts int, op func(attempt int) error) error {
	for attempt := 0; ; attempt++ {
		err := op(attempt)
		if err == nil {
			return nil
		}
		var pe *permanentError
		if errors.As(err, &pe) {
			return pe.err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		}
		if attempts > 0 && attempt+1 >= attempts {
			return err
		}
		if !Sleep(ctx, b.Delay(attempt)) {
			return fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		}
	}
}

// Permanent marks err as a failure no retry can fix, so that Retry returns err at once. The
// result wraps err (errors.Is and errors.As see through it); Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

// isPermanent reports whether err was marked by Permanent.
func isPermanent(err error) bool {
	var pe *permanentError
	return errors.As(err, &pe)
}

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Sleep waits d and reports whether ctx is still live afterwards; it returns false as soon as ctx
// ends.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return ctx.Err() == nil
	}
}
