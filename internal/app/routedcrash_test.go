package app

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// routedCrashEvents is the number of events of TestRoutedCrash (the run: about 120k events
// and 30k duplicates); KDEDUP_ROUTED_EVENTS sets another.
func routedCrashEvents(t *testing.T) int {
	if s := os.Getenv("KDEDUP_ROUTED_EVENTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return 120_000
}

// routedRecord is one input record of TestRoutedCrash: its topic, partition and content.
type routedRecord struct {
	topic string
	p     int
	m     kafkaio.Record
}

// routedStream builds n events on two 6-partition topics plus n/4 duplicates, a third on the
// original's partition, a third on another partition of its topic and a third on the other topic,
// each after its original, shuffled otherwise.
func routedStream(n int, seed uint64) (recs []routedRecord, events map[string]kafkaio.Record) {
	rng := rand.New(rand.NewPCG(seed, 1))
	events = make(map[string]kafkaio.Record, n)
	topics := []string{"in", "in2"}
	for i := range n {
		id := fmt.Sprintf("ev-%d", i)
		m := kafkaio.Record{Key: []byte(id), Value: fmt.Appendf(nil, "payload %d %x", i, rng.Uint64()),
			Headers: []kafkaio.Header{{Key: "src", Value: []byte(topics[i%2])}}, Time: time.UnixMilli(1_790_000_000_000 + int64(i))}
		events[id] = m
		t, p := i%2, rng.IntN(6)
		recs = append(recs, routedRecord{topics[t], p, m})
		if i%4 != 3 {
			continue
		}
		switch i % 3 {
		case 0:
			recs = append(recs, routedRecord{topics[t], p, m})
		case 1:
			recs = append(recs, routedRecord{topics[t], (p + 1 + rng.IntN(5)) % 6, m})
		default:
			recs = append(recs, routedRecord{topics[1-t], rng.IntN(6), m})
		}
	}
	return recs, events
}

// produceRouted produces recs in order, in requests of up to 500 records per partition.
func produceRouted(t *testing.T, cl testbroker.Broker, recs []routedRecord) {
	t.Helper()
	type tp struct {
		topic string
		p     int
	}
	batches := map[tp][]kafkaio.Record{}
	flush := func() {
		for k, ms := range batches {
			if err := cl.Produce(context.Background(), k.topic, k.p, ms...); err != nil {
				t.Error(err)
			}
			delete(batches, k)
		}
	}
	for i, r := range recs {
		k := tp{r.topic, r.p}
		batches[k] = append(batches[k], r.m)
		if i%3000 == 2999 {
			flush()
		}
	}
	flush()
}

// TestRoutedCrash is the run of the routed scope as processes: two input topics of 6
// partitions, route and output topics of 12, three replicas; one SIGTERMed and one SIGKILLed while
// records flow, then one restarted. Every event must be in the output exactly once (0 leaked, 0
// lost at a false-positive rate of 1e-9), in the output partition its identity routes to, with
// its key, value, headers and timestamp unchanged. A copy the second stage processed after the
// window's memory of the one before is not a leak: the window forgot the identity, as it must
// (see routedCopies.judge). KDEDUP_ROUTED_WINDOW_INTERVAL sets a shorter DEDUP_WINDOW_INTERVAL than
// the 1m of restartEnviron: the run then spans many generations, and the judgement is tested at
// the window's edge.
func TestRoutedCrash(t *testing.T) {
	cl := testbroker.Start(t, testbroker.Fake, testbroker.Options{Topics: map[string]int32{"in": 6, "in2": 6, "route": 12, "out": 12}})
	environ := restartEnviron(cl, t.TempDir(), "routed")
	environ["KAFKA_INPUT_TOPIC"] = "in,in2"
	environ["KAFKA_ROUTE_TOPIC"] = "route"
	environ["DEDUP_PROCESSED_HEADER"] = processedHeader // to tell a leak from an identity the window forgot
	if d := os.Getenv("KDEDUP_ROUTED_WINDOW_INTERVAL"); d != "" {
		environ["DEDUP_WINDOW_INTERVAL"] = d
	}
	recs, events := routedStream(routedCrashEvents(t), 31)
	ws := []*worker{startWorker(t, environ), startWorker(t, environ), startWorker(t, environ)}
	for _, w := range ws {
		waitFor(t, w, 60*time.Second, "worker started", func() bool { return true })
	}
	began := time.Now()
	third := len(recs) / 3
	produceRouted(t, cl, recs[:third])
	ws[0].signal(t, syscall.SIGTERM)
	produceRouted(t, cl, recs[third:2*third])
	if code := ws[0].wait(t, 60*time.Second); code != 0 {
		t.Errorf("SIGTERMed worker exited with %d", code)
	}
	// Kill while the stages are busy: the first two thirds partly routed, not all deduplicated.
	waitFor(t, ws[1], 2*time.Minute, "a third of the records routed", func() bool {
		return topicRecords(cl, "route") >= int64(third)
	})
	t.Logf("SIGKILL at %s (%v in) with %d of %d records routed, %d in the output", time.Now().UTC().Format("15:04:05.000"),
		time.Since(began).Round(time.Millisecond), topicRecords(cl, "route"), 2*third, topicRecords(cl, "out"))
	ws[1].signal(t, syscall.SIGKILL)
	produceRouted(t, cl, recs[2*third:])
	ws = append(ws, startWorker(t, environ))
	for _, g := range [][2]string{{"kdedup-in-in", "in"}, {"kdedup-in-in2", "in2"}, {"kdedup-route", "route"}} {
		waitCommitted(t, cl, g[0], g[1], ws[2])
	}
	t.Logf("every group at the end %v after the first record", time.Since(began).Round(time.Millisecond))
	checkRoutedOutput(t, cl, events, windowMemory(t, environ))
}

// topicRecords returns the sum of the end offsets of topic's partitions (0 when it cannot tell).
func topicRecords(cl testbroker.Broker, topic string) int64 {
	ends, err := cl.EndOffsets(context.Background(), topic)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ends {
		n += e
	}
	return n
}

// waitCommitted waits until group committed the end of every partition of topic (with records).
func waitCommitted(t *testing.T, cl testbroker.Broker, group, topic string, alive *worker) {
	t.Helper()
	waitFor(t, alive, 5*time.Minute, group+" at the end of "+topic, func() bool {
		ends, err1 := cl.EndOffsets(context.Background(), topic)
		com, err2 := cl.Committed(context.Background(), group, topic)
		if err1 != nil || err2 != nil {
			return false
		}
		for p, end := range ends {
			if end > 0 && com[p] != end {
				return false
			}
		}
		return true
	})
}

// routedCopy is one output record of an identity: where it lies and when the second stage
// processed it (its processed header).
type routedCopy struct {
	p         int
	offset    int64
	processed time.Time
}

func (c routedCopy) String() string {
	return fmt.Sprintf("out %d/%d processed %s", c.p, c.offset, c.processed.UTC().Format("15:04:05.000"))
}

// routedCopies are the output records of each identity.
type routedCopies map[string][]routedCopy

// judge splits the later copies of every identity by the time the second stage processed them
// after the copy before: within the window's memory (a leak: the window promises to remember the
// identity that long) or after it (the window forgot the identity, as it must: on a slow machine
// the stream can outlast the window). The header holds the time read before the copy's batch was
// judged, and its filter rotated to that time first, so the window remembers a copy from its
// header's time on: a copy that leaked within the window is never counted as forgotten. It
// returns the identities of both kinds.
func (cs routedCopies) judge(memory time.Duration) (inWindow, expired int, leakedIDs, expiredIDs []string) {
	for _, id := range slices.Sorted(maps.Keys(cs)) {
		c := cs[id]
		slices.SortFunc(c, func(a, b routedCopy) int { return a.processed.Compare(b.processed) })
		leak, exp := false, false
		for i := 1; i < len(c); i++ {
			if c[i].processed.Sub(c[i-1].processed) < memory {
				inWindow, leak = inWindow+1, true
			} else {
				expired, exp = expired+1, true
			}
		}
		if leak {
			leakedIDs = append(leakedIDs, id)
		}
		if exp {
			expiredIDs = append(expiredIDs, id)
		}
	}
	return inWindow, expired, leakedIDs, expiredIDs
}

// checkRoutedOutput checks that the output holds every event, unchanged (but for the processed
// header), in the partition of its identity, and exactly once within the window's memory.
func checkRoutedOutput(t *testing.T, cl testbroker.Broker, events map[string]kafkaio.Record, memory time.Duration) {
	t.Helper()
	out, err := cl.ReadAll(context.Background(), "out")
	if err != nil {
		t.Fatal(err)
	}
	copies := make(routedCopies, len(events))
	changed := 0
	for p, msgs := range out {
		for _, m := range msgs {
			id := string(m.Key)
			at, rest, stamped := cutProcessed(m)
			copies[id] = append(copies[id], routedCopy{p, m.Offset, at})
			want, ok := events[id]
			if !ok || !stamped || sameMessage(rest, want) != "" || consumer.RoutePartition(m.Key, 12) != p {
				if changed++; changed <= 5 {
					t.Errorf("output partition %d: record %s differs or is misplaced (stamped %v): %s", p, id, stamped, sameMessage(rest, want))
				}
			}
		}
	}
	lost, copied := 0, 0
	for id := range events {
		switch n := len(copies[id]); {
		case n == 0:
			lost++
		case n > 1:
			copied += n - 1
		}
	}
	inWindow, expired, leakedIDs, expiredIDs := copies.judge(memory)
	t.Logf("%d events: %d later copies in the output, %d of them processed within the window's memory (%v) of the copy "+
		"before (leaked), %d later (the window forgot the identity); %d lost, %d changed or misplaced",
		len(events), copied, inWindow, memory, expired, lost, changed)
	if copied > 0 {
		routed := routeCopies(t, cl)
		for _, ids := range [][]string{leakedIDs, expiredIDs} {
			for _, id := range ids[:min(5, len(ids))] {
				t.Logf("%s: output copies %v; route copies %v", id, copies[id], routed[id])
			}
		}
	}
	if inWindow != 0 || lost != 0 {
		t.Errorf("%d leaked within the window, %d lost", inWindow, lost)
	}
}

// cutProcessed returns the time in m's processed header (the last header) and m without it;
// false when m has no such header or more than one.
func cutProcessed(m kafkaio.Record) (time.Time, kafkaio.Record, bool) {
	n := 0
	for _, h := range m.Headers {
		if h.Key == processedHeader {
			n++
		}
	}
	last := len(m.Headers) - 1
	if n != 1 || m.Headers[last].Key != processedHeader || len(m.Headers[last].Value) != 8 {
		return time.Time{}, m, false
	}
	at := time.UnixMilli(int64(binary.BigEndian.Uint64(m.Headers[last].Value)))
	m.Headers = m.Headers[:last]
	return at, m, true
}

// routeCopies describes the route topic's records of each identity: route partition, offset and
// the input position the router read it from, to tell in a failure's log a record routed twice
// (one input position) from a duplicate of the stream.
func routeCopies(t *testing.T, cl testbroker.Broker) map[string][]string {
	t.Helper()
	msgs, err := cl.ReadAll(context.Background(), "route")
	if err != nil {
		t.Errorf("reading the route topic: %v", err)
		return nil
	}
	out := map[string][]string{}
	for p, ms := range msgs {
		for _, m := range ms {
			from := ""
			for _, h := range m.Headers {
				if h.Key == consumer.RouteHeaderFrom {
					from = string(h.Value)
				}
			}
			out[string(m.Key)] = append(out[string(m.Key)], fmt.Sprintf("route %d/%d from %s", p, m.Offset, from))
		}
	}
	return out
}

// sameMessage says how a differs from b in key, value, headers and timestamp; "" when it does not.
func sameMessage(a, b kafkaio.Record) string {
	switch {
	case string(a.Key) != string(b.Key) || string(a.Value) != string(b.Value):
		return "key or value"
	case !a.Time.Equal(b.Time):
		return fmt.Sprintf("time %v != %v", a.Time, b.Time)
	case len(a.Headers) != len(b.Headers):
		return fmt.Sprintf("headers %v != %v", a.Headers, b.Headers)
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || string(a.Headers[i].Value) != string(b.Headers[i].Value) {
			return fmt.Sprintf("headers %v != %v", a.Headers, b.Headers)
		}
	}
	return ""
}
