package app

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// replayRecord is one record of the event-time replay: its partition, identity and timestamp,
// where it sits in its partition's stream (at, an event time: late records are stamped far
// before their place) and whether it must reach the output.
type replayRecord struct {
	partition int
	id        string
	ts, at    time.Time
	pass      bool
}

// replayStream returns 10 hours of event time starting at base, on every input partition: per
// partition, originals spread over the 10 hours; about a fifth of them re-sent within 3 h (must be
// dropped), some re-sent 4.5 h later and others 6 h later (must pass, once); and new records
// stamped a day before base, placed among the last four hours (late: must pass). Records are in
// timestamp order within a partition, the late ones aside.
func replayStream(rng *rand.Rand, base time.Time, perPartition int) [][]replayRecord {
	const span = 10 * time.Hour
	parts := make([][]replayRecord, restartPartitions)
	for p := range parts {
		var recs []replayRecord
		add := func(id string, ts, at time.Time, pass bool) {
			ts = ts.Truncate(time.Millisecond) // Kafka keeps milliseconds
			recs = append(recs, replayRecord{partition: p, id: id, ts: ts, at: at, pass: pass})
		}
		for i := range perPartition {
			id := fmt.Sprintf("p%d-%05d", p, i)
			t0 := base.Add(time.Duration(rng.Int64N(int64(span))))
			add(id, t0, t0, true)
			var delay time.Duration
			pass := true
			switch r := rng.Float64(); {
			case r < 0.2:
				delay, pass = 10*time.Minute+time.Duration(rng.Int64N(int64(2*time.Hour+40*time.Minute))), false
			case r < 0.35:
				delay = 4*time.Hour + 30*time.Minute
			case r < 0.5:
				delay = 6 * time.Hour
			}
			if t := t0.Add(delay); delay > 0 && t.Before(base.Add(span)) {
				add(id, t, t, pass)
			}
		}
		for i := range perPartition / 20 {
			at := base.Add(6*time.Hour + time.Duration(rng.Int64N(int64(4*time.Hour))))
			add(fmt.Sprintf("p%d-late-%04d", p, i), at.Add(-34*time.Hour), at, true)
		}
		sort.SliceStable(recs, func(a, b int) bool { return recs[a].at.Before(recs[b].at) })
		parts[p] = recs
	}
	return parts
}

// TestEventTimeReplay replays 10 hours of event time through a worker with
// DEDUP_WINDOW_CLOCK=event and a 4 × 1h window in a few seconds: re-sends within 3 h of their
// original are dropped, re-sends 4.5 h and 6 h later pass exactly once, new records stamped a day
// in the past pass (counted as late), and each output partition holds exactly the records that
// must pass, in input order, with their input timestamps. The restart case stops the worker after
// the first 5 hours of data (SIGTERM: a snapshot per partition) and replays the rest through a new
// one, which must resume at the data's time, ten wall-clock hours after the data.
func TestEventTimeReplay(t *testing.T) {
	t.Parallel()
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "one-worker", true: "restart"}[restart], func(t *testing.T) {
			t.Parallel()
			testEventTimeReplay(t, restart)
		})
	}
}

func testEventTimeReplay(t *testing.T, restart bool) {
	cl := restartCluster(t)
	dir := ""
	if restart {
		dir = t.TempDir()
	}
	environ := restartEnviron(cl, dir, "partition")
	environ["DEDUP_WINDOW_INTERVAL"] = "1h"
	environ["DEDUP_WINDOW_CLOCK"] = "event"
	environ["KAFKA_BATCH_SIZE"] = "500"
	base := time.Now().Add(-12 * time.Hour)
	perPartition := 1500
	if testing.Short() {
		perPartition = 500
	}
	stream := replayStream(rand.New(rand.NewPCG(11, 12)), base, perPartition)
	split := base.Add(5 * time.Hour)
	if !restart {
		split = base.Add(24 * time.Hour) // everything in the first run
	}
	late := produceReplay(t, cl, stream, func(r replayRecord) bool { return r.at.Before(split) })
	w := startWorker(t, environ)
	waitFor(t, w, 30*time.Second, "catch-up", func() bool { return caughtUp(cl) })
	if restart {
		w.signal(t, syscall.SIGTERM)
		if code := w.wait(t, 15*time.Second); code != 0 {
			t.Fatalf("exit status %d after SIGTERM; log:\n%s", code, tail(w.stderr.String(), logTail))
		}
		late += produceReplay(t, cl, stream, func(r replayRecord) bool { return !r.at.Before(split) })
		w = startWorker(t, environ)
		waitFor(t, w, 30*time.Second, "catch-up", func() bool { return caughtUp(cl) })
		if _, ok := w.event("state restored"); !ok {
			t.Errorf("the second worker restored no snapshot; log:\n%s", tail(w.stderr.String(), logTail))
		}
	}
	m := w.metrics(t)
	if got := m.value("kdedup_filter_late_records_total"); got != float64(late) {
		t.Errorf("kdedup_filter_late_records_total = %v, want the %d records stamped a day early", got, late)
	}
	if lag := m.value("kdedup_filter_stream_lag_seconds", "filter", "0"); lag < 2*3600 || lag > 3*3600 {
		t.Errorf("stream lag of filter 0 = %vs, want about 2h (the replay ends 2h before the wall clock)", lag)
	}
	got, err := cl.ReadAll(context.Background(), "out")
	if err != nil {
		t.Fatal(err)
	}
	checkReplayOutput(t, stream, got)
}

// produceReplay writes the records of stream that take selects to the input topic, in stream
// order, and returns how many of them are stamped a day early (late).
func produceReplay(t *testing.T, cl testbroker.Broker, stream [][]replayRecord, take func(replayRecord) bool) (late int) {
	t.Helper()
	var dropped, passedAgain int
	for p, recs := range stream {
		var msgs []kafkaio.Record
		seen := map[string]bool{}
		for _, r := range recs {
			resent := seen[r.id]
			seen[r.id] = true
			if !take(r) {
				continue
			}
			msgs = append(msgs, kafkaio.Record{Key: []byte(r.id), Value: []byte(r.id), Time: r.ts})
			switch {
			case r.at.Sub(r.ts) > time.Hour: // stamped a day before its place
				late++
			case !r.pass:
				dropped++
			case resent:
				passedAgain++
			}
		}
		if err := cl.Produce(context.Background(), "in", p, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("produced %d re-sends within 3h, %d re-sends 4.5h or 6h later, %d records stamped a day early", dropped, passedAgain, late)
	return late
}

// checkReplayOutput compares each output partition with the records of its input partition that
// must pass, in order, and reports leaked and lost records by kind.
func checkReplayOutput(t *testing.T, stream [][]replayRecord, got map[int][]kafkaio.Record) {
	t.Helper()
	leaked, lost := 0, 0
	for p, recs := range stream {
		var want []replayRecord
		for _, r := range recs {
			if r.pass {
				want = append(want, r)
			}
		}
		out := got[p]
		keys := func(i, j int) (string, string) { return string(out[i].Key), want[j].id }
		i, j := 0, 0
		for i < len(out) && j < len(want) {
			a, b := keys(i, j)
			switch {
			case a == b && out[i].Time.Equal(want[j].ts):
				i, j = i+1, j+1
			case slices.ContainsFunc(want[j:], func(r replayRecord) bool { return r.id == a && r.ts.Equal(out[i].Time) }):
				lost++ // want[j] is missing from the output
				t.Logf("partition %d: lost %s stamped %s", p, b, want[j].ts.Format(time.TimeOnly))
				j++
			default:
				leaked++
				t.Logf("partition %d: leaked %s stamped %s", p, a, out[i].Time.Format(time.TimeOnly))
				i++
			}
		}
		leaked += len(out) - i
		lost += len(want) - j
	}
	if leaked > 0 || lost > 0 {
		t.Errorf("%d leaked, %d lost (or out of order)", leaked, lost)
	}
}
