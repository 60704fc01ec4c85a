package loadtest

import (
	"fmt"
	"io"
	"time"
)

// progress prints progress lines until stopped.
type progress struct {
	w      io.Writer
	tty    bool
	stopCh chan string
	done   chan struct{}
}

type sample struct {
	at            time.Duration
	created, seen int64
}

// startProgress starts the progress printer, or returns an inert one when cfg.Progress is nil.
func startProgress(cfg Config, start time.Time, gen *generator, st *outputState, inParts int) *progress {
	p := &progress{w: cfg.Progress, tty: cfg.TTY, stopCh: make(chan string), done: make(chan struct{})}
	if p.w == nil {
		close(p.done)
		return p
	}
	every := cfg.ProgressInterval
	if p.tty {
		every = 250 * time.Millisecond
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		hist := []sample{{}} // the last ~2s, for rates
		line := func() string {
			now := time.Since(start)
			s := sample{at: now, created: gen.created.Load(), seen: st.observed.Load()}
			hist = append(hist, s)
			for len(hist) > 2 && now-hist[0].at > 2*time.Second {
				hist = hist[1:]
			}
			var sendRate, outRate float64
			if d := (s.at - hist[0].at).Seconds(); d > 0 {
				sendRate = float64(s.created-hist[0].created) / d
				outRate = float64(s.seen-hist[0].seen) / d
			}
			total := int64(cfg.Count + inParts)
			pct := 100 * float64(min(s.created, total)) / float64(total)
			eta := "ETA -"
			switch {
			case gen.done.Load():
				eta = fmt.Sprintf("draining: %d/%d end markers", st.nMarkers.Load(), inParts)
			case sendRate > 0:
				eta = "ETA " + (time.Duration(float64(total-s.created) / sendRate * float64(time.Second))).Round(time.Second).String()
			}
			return fmt.Sprintf("[%6.1fs] sent %d/%d (%.1f%%) %s | out %d %s | %s",
				now.Seconds(), min(s.created, int64(cfg.Count)), cfg.Count, pct, fmtRate(sendRate), s.seen, fmtRate(outRate), eta)
		}
		for {
			select {
			case final := <-p.stopCh:
				if final != "" {
					l := line()
					if p.tty {
						fmt.Fprintf(p.w, "\r%s\033[K\n", l)
					} else {
						fmt.Fprintln(p.w, l)
					}
				} else if p.tty {
					fmt.Fprintln(p.w)
				}
				return
			case <-t.C:
				l := line()
				if p.tty {
					fmt.Fprintf(p.w, "\r%s\033[K", l)
				} else {
					fmt.Fprintln(p.w, l)
				}
			}
		}
	}()
	return p
}

// stop prints a last line (when final is not empty) and waits for the printer to exit.
func (p *progress) stop(final string) {
	select {
	case p.stopCh <- final:
	case <-p.done:
	}
	<-p.done
}
