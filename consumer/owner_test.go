package consumer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/segmentio/kafka-go"
)

// releaseDeduper counts the Revoke and Discard calls of partition 0.
type releaseDeduper struct{ uniqueDeduper }

var releaseCounts struct{ revokes, discards int }

func (releaseDeduper) Revoke(context.Context, int32) error  { releaseCounts.revokes++; return nil }
func (releaseDeduper) Discard(context.Context, int32) error { releaseCounts.discards++; return nil }

// fencedGen refuses every commit with err.
type fencedGen struct{ err error }

func (g fencedGen) commitOffsets(map[int]kafkaio.Committed) error { return g.err }

// TestLostGenerationReleasesWithoutSaving: a worker resumed after a pause longer than its session
// timeout finds its final commit refused with ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID. Its
// partitions may already be consumed by another member, so the release must drop their state
// (Discard), never save it (Revoke); a refusal that does not end the generation keeps Revoke.
func TestLostGenerationReleasesWithoutSaving(t *testing.T) {
	for _, tc := range []struct {
		err      error
		discards int
	}{
		{kafka.IllegalGeneration, 1},
		{kafka.UnknownMemberId, 1},
		{kafka.RebalanceInProgress, 0},
		{errors.New("connection reset"), 0},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			releaseCounts.revokes, releaseCounts.discards = 0, 0
			w := &Worker{dedup: releaseDeduper{}, log: slog.New(slog.DiscardHandler), cfg: Config{RebalanceTimeout: time.Minute}}
			// Confirmed just now: check asks the coordinator only once the confirmation is stale.
			own := newOwnership(nil, kafkaio.Member{Group: "g", Generation: 7, ID: "m"}, time.Hour, time.Hour)
			c := newCommitter(fencedGen{tc.err}, "in", time.Hour, NopObserver{}, discardSampler())
			c.own = own
			go c.run()
			defer c.close()
			ctx := context.Background()
			if err := c.flush(ctx, 0, 10); err == nil {
				t.Fatal("the refused commit succeeded")
			}
			outcome := w.handBack(ctx, ctx, own, 0, true)
			if releaseCounts.discards != tc.discards || releaseCounts.revokes != 1-tc.discards {
				t.Fatalf("%s: revokes %d, discards %d (%q); want %d discards", tc.err, releaseCounts.revokes,
					releaseCounts.discards, outcome, tc.discards)
			}
			if err := own.check(ctx); (err != nil) != (tc.discards == 1) || (err != nil && !errors.Is(err, ErrNotOwner)) {
				t.Fatalf("check after %s = %v", tc.err, err)
			}
		})
	}
}

// TestOwnershipCheckOfAnEndedCaller: a check whose caller's context ended (an Assign called off
// when its generation ended) is no answer of the coordinator, and must not make the checks that
// follow (the release's saves) fail.
func TestOwnershipCheckOfAnEndedCaller(t *testing.T) {
	c := &kafka.Client{Addr: kafka.TCP("127.0.0.1:1")}
	own := newOwnership(c, kafkaio.Member{Group: "g", Generation: 3, ID: "m"}, 100*time.Millisecond, time.Second)
	own.base = own.base.Add(-time.Hour) // the last confirmation is an hour old: check asks
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := own.check(ended); err == nil {
		t.Fatal("a check with an ended context succeeded")
	}
	own.mu.Lock()
	cached := own.askErr
	own.mu.Unlock()
	if cached != nil {
		t.Fatalf("the ended caller's failure was kept as the coordinator's answer: %v", cached)
	}
}

// TestOwnershipLease: a check that cannot reach the coordinator passes within the lease (the
// session timeout since the last confirmation: the partitions cannot have moved yet) and fails
// after it, without taking the generation for lost.
func TestOwnershipLease(t *testing.T) {
	c := &kafka.Client{Addr: kafka.TCP("127.0.0.1:1"), Timeout: time.Second}
	own := newOwnership(c, kafkaio.Member{Group: "g", Generation: 3, ID: "m"}, 100*time.Millisecond, time.Minute)
	own.base = own.base.Add(-time.Second) // past fresh, within the lease
	if err := own.check(context.Background()); err != nil {
		t.Fatalf("within the lease: %v", err)
	}
	own.base = own.base.Add(-2 * time.Minute) // past the lease
	err := own.check(context.Background())
	if err == nil || errors.Is(err, ErrNotOwner) {
		t.Fatalf("past the lease, with the coordinator unreachable: %v; want an error that is not ErrNotOwner", err)
	}
}

// TestSendOwned: the producer sends a request only while the latest generation is not known to
// be lost. A process resumed after a pause past its session learns from the coordinator that its
// generation ended, and neither sends the batch it held nor re-sends a timed-out one after its
// partitions' new owner wrote the same records.
func TestSendOwned(t *testing.T) {
	w := &Worker{}
	ctx := context.Background()
	if err := w.sendOwned(ctx); err != nil {
		t.Fatalf("before any generation: %v", err)
	}
	own := newOwnership(nil, kafkaio.Member{Group: "g", Generation: 7, ID: "m"}, time.Hour, time.Hour)
	w.own.Store(own)
	if err := w.sendOwned(ctx); err != nil {
		t.Fatalf("owned generation: %v", err)
	}
	own.fence(kafka.IllegalGeneration)
	if err := w.sendOwned(ctx); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("lost generation: %v, want ErrNotOwner", err)
	}
}

// TestReleaseLogsUnacknowledgedRecords: a release that gives up a batch unacknowledged (Discard)
// logs how many output records the batch held, the most that a request of it landing after the
// next owner's re-warm can write twice under at-least-once; a drained release logs none.
func TestReleaseLogsUnacknowledgedRecords(t *testing.T) {
	for _, tc := range []struct {
		drained bool
		state   string
		want    any // unacknowledged_records, nil for absent
	}{
		{false, "discarded", float64(3)},
		{true, "revoked", nil},
	} {
		t.Run(tc.state, func(t *testing.T) {
			releaseCounts.revokes, releaseCounts.discards = 0, 0
			var buf bytes.Buffer
			w := &Worker{dedup: releaseDeduper{}, obs: NopObserver{}, log: slog.New(slog.NewJSONHandler(&buf, nil)),
				cfg: Config{RebalanceTimeout: time.Minute}}
			st := &partitionState{p: 0, out: make([]kafkaio.Record, 3)}
			ctx := context.Background()
			w.release(ctx, ctx, &committer{}, st, tc.drained, func() time.Duration { return time.Millisecond })
			var line map[string]any
			for l := range bytes.Lines(buf.Bytes()) {
				var m map[string]any
				if json.Unmarshal(l, &m) == nil && m["msg"] == "partition released" {
					line = m
				}
			}
			if line == nil {
				t.Fatalf("no \"partition released\" line in:\n%s", buf.String())
			}
			if line["state"] != tc.state || line["unacknowledged_records"] != tc.want {
				t.Errorf("released with state %v, unacknowledged_records %v; want %s, %v", line["state"],
					line["unacknowledged_records"], tc.state, tc.want)
			}
		})
	}
}

// refusedRevoke is a Deduper whose Revoke is refused because the generation was lost while it
// saved: the Deduper asks the ownership again before it writes (dedup's Set does).
type refusedRevoke struct{ uniqueDeduper }

func (refusedRevoke) Revoke(context.Context, int32) error {
	return fmt.Errorf("dedup: saving in.p0: not saved: %w", ErrNotOwner)
}
func (refusedRevoke) Discard(context.Context, int32) error { return nil }

// TestRevokeRefusedForLostGeneration: a generation lost between the release's ownership check and
// the Revoke's own makes the Revoke's save refused; the release is then what the check would have
// made it, a partition dropped because it may have moved, logged as a warning, not a failed
// revoke at Error.
func TestRevokeRefusedForLostGeneration(t *testing.T) {
	var buf bytes.Buffer
	w := &Worker{dedup: refusedRevoke{}, obs: NopObserver{}, log: slog.New(slog.NewJSONHandler(&buf, nil)),
		cfg: Config{RebalanceTimeout: time.Minute}}
	ctx := context.Background()
	w.release(ctx, ctx, &committer{}, &partitionState{p: 0}, true, func() time.Duration { return time.Millisecond })
	states := []any{}
	for l := range bytes.Lines(buf.Bytes()) {
		var m map[string]any
		if json.Unmarshal(l, &m) != nil {
			continue
		}
		if m["level"] == "ERROR" {
			t.Errorf("logged an error: %s", l)
		}
		if m["msg"] == "partition released" {
			states = append(states, m["state"])
		}
	}
	if len(states) != 1 || states[0] != "discarded: generation lost" {
		t.Errorf("released with states %v, want [discarded: generation lost]", states)
	}
}
