package dedup

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// produce appends ids to output partition q of topic, as the worker's acknowledged write does.
func (f *fakeTopic) produce(q int32, ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.parts == nil {
		f.parts = map[int32][]fakeRecord{}
	}
	for _, id := range ids {
		f.parts[q] = append(f.parts[q], fakeRecord{id: id, ts: time.Now()})
	}
}

// TestGlobalDiscardAndRedelivery: under global scope a partition given up with a batch that never
// reached the output comes back to the same Set. Its re-delivered records must pass (the filter
// is rebuilt from the last good snapshot and the output topic), while everything the output holds,
// including a record another partition had in flight during the rebuild, stays a duplicate.
func TestGlobalDiscardAndRedelivery(t *testing.T) {
	ctx := context.Background()
	p, store := dirPersister(t)
	topic := &fakeTopic{parts: map[int32][]fakeRecord{0: nil, 1: nil}}
	s, err := NewSet(ctx, Config{Scope: ScopeGlobal, Window: testWindow(), Persister: p, Output: topic,
		SealTimeout: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	for _, q := range []int32{0, 1} {
		if err := s.Assign(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	batch := func(q int32, next int64, id string, ack bool) {
		s.Processing(q, next)
		if s.Seen(q, []byte(id), time.Time{}) {
			t.Fatalf("new id %s reported seen", id)
		}
		if ack {
			topic.produce(q, id)
			s.Acked(q, next)
		}
	}
	batch(0, 1, "in-snapshot", true)
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	batch(0, 2, "after-snapshot", true)
	batch(0, 3, "never-produced", false)
	if err := s.Discard(ctx, 0); err != nil { // the release budget ran out before the ack
		t.Fatal(err)
	}
	batch(1, 1, "in-flight", false) // partition 1 keeps running on the old filter

	assigned := make(chan error, 1)
	go func() { assigned <- s.Assign(ctx, 0) }()
	topic.produce(1, "in-flight") // acknowledged while the rebuild runs, or before it starts
	s.Acked(1, 1)
	if err := <-assigned; err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"in-snapshot", "after-snapshot", "in-flight"} {
		if !s.Seen(1, []byte(id), time.Time{}) {
			t.Errorf("%s, in the output topic, is not a duplicate after the rebuild", id)
		}
	}
	s.Processing(0, 3)
	if s.Seen(0, []byte("never-produced"), time.Time{}) {
		t.Fatal("the re-delivered record, never produced, was dropped as a duplicate: lost")
	}
	topic.produce(0, "never-produced")
	s.Acked(0, 3)
	s.Processing(1, 2)
	s.Acked(1, 2)
	before, _ := store.List(ctx, globalUnit)
	if err := s.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	after, _ := store.List(ctx, globalUnit)
	if len(before) == 0 || len(after) == 0 || after[0].Seq <= before[0].Seq {
		t.Fatal("the rebuilt global filter is not snapshotted")
	}
}
