package kafkaio_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/segmentio/kafka-go"
)

// groupMember returns member i of group g on topic t of b, static with instance id "i<i>" when
// static.
func groupMember(b testbroker.Broker, static bool, i int) *kafkaio.GroupMember {
	cfg := kafkaio.GroupConfig{Group: b.Name("g"), Topic: b.Name("t"), SessionTimeout: 10 * time.Second,
		RebalanceTimeout: 20 * time.Second, Sticky: &kafkaio.StickyBalancer{}}
	if static {
		cfg.InstanceID = "i" + string(rune('0'+i))
	}
	return kafkaio.NewGroupMember(kafkaio.Conn{Brokers: b.Addrs()}.Client(10*time.Second), cfg)
}

// joinAll joins every member concurrently and returns their generations.
func joinAll(t *testing.T, ctx context.Context, ms ...*kafkaio.GroupMember) []kafkaio.Generation {
	t.Helper()
	gens := make([]kafkaio.Generation, len(ms))
	errs := make(chan error, len(ms))
	for i, m := range ms {
		go func() {
			var err error
			gens[i], err = m.Join(ctx)
			errs <- err
		}()
	}
	for range ms {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return gens
}

// checkSplit fails unless gens share one generation and split partitions 0..n-1 between them.
func checkSplit(t *testing.T, n int, gens ...kafkaio.Generation) {
	t.Helper()
	var all []int
	for _, g := range gens {
		if g.ID != gens[0].ID {
			t.Fatalf("generations differ: %+v", gens)
		}
		all = append(all, g.Partitions...)
	}
	slices.Sort(all)
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(all, want) {
		t.Fatalf("partitions %v, want each of %v once (%+v)", all, want, gens)
	}
}

// rejoin starts the Join of fresh (none for a member that left), waits until the old members'
// heartbeat says a rebalance is in progress, and then rejoins them: it returns the generations
// of old and then fresh.
func rejoin(t *testing.T, ctx context.Context, gens []kafkaio.Generation, old []*kafkaio.GroupMember, fresh ...*kafkaio.GroupMember) []kafkaio.Generation {
	t.Helper()
	type joined struct {
		gen kafkaio.Generation
		err error
	}
	ch := make([]chan joined, len(fresh))
	for i, m := range fresh {
		ch[i] = make(chan joined, 1)
		go func() {
			g, err := m.Join(ctx)
			ch[i] <- joined{g, err}
		}()
	}
	for {
		err := old[0].Heartbeat(ctx, gens[0])
		if errors.Is(err, kafka.RebalanceInProgress) {
			break
		}
		if err != nil || !kafkaio.Sleep(ctx, 20*time.Millisecond) {
			t.Fatalf("heartbeat while the membership changes: %v, want REBALANCE_IN_PROGRESS", err)
		}
	}
	out := joinAll(t, ctx, old...)
	for _, c := range ch {
		j := <-c
		if j.err != nil {
			t.Fatal(j.err)
		}
		out = append(out, j.gen)
	}
	return out
}

func TestGroupMember(t *testing.T) {
	testbroker.Each(t, testbroker.Options{Topics: map[string]int32{"t": 4}}, func(t *testing.T, b testbroker.Broker) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ms := []*kafkaio.GroupMember{groupMember(b, false, 0), groupMember(b, true, 1)}
		gens := joinAll(t, ctx, ms[0])
		checkSplit(t, 4, gens...)
		gens = rejoin(t, ctx, gens, ms[:1], ms[1])
		checkSplit(t, 4, gens...)
		for i, m := range ms {
			if err := m.Heartbeat(ctx, gens[i]); err != nil {
				t.Fatalf("member %d heartbeat: %v", i, err)
			}
		}

		// Commits carry the leader epoch, and the member that commits must be in the generation.
		p := gens[0].Partitions[0]
		if err := ms[0].Commit(ctx, gens[0], map[int]kafkaio.Committed{p: {Offset: 7, LeaderEpoch: 0}}); err != nil {
			t.Fatal(err)
		}
		got, err := ms[1].Fetch(ctx, []int{0, 1, 2, 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[p] != (kafkaio.Committed{Offset: 7, LeaderEpoch: 0}) {
			t.Fatalf("committed %v, want partition %d at 7 with epoch 0", got, p)
		}
		stale := gens[0]
		stale.ID--
		if err := ms[0].Commit(ctx, stale, map[int]kafkaio.Committed{p: {Offset: 8, LeaderEpoch: 0}}); !kafkaio.Fenced(err) {
			t.Fatalf("commit in an old generation: %v, want a fenced error", err)
		}

		// The static member restarts (a new process, same instance id): it gets its partitions
		// back in the same generation, and the old process is fenced.
		restarted := groupMember(b, true, 1)
		g, err := restarted.Join(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if g.ID != gens[1].ID || !slices.Equal(g.Partitions, gens[1].Partitions) {
			t.Fatalf("static member rejoined to %+v, want generation %d with %v", g, gens[1].ID, gens[1].Partitions)
		}
		if err := ms[0].Heartbeat(ctx, gens[0]); err != nil {
			t.Fatalf("the dynamic member was disturbed by a static restart: %v", err)
		}
		if err := ms[1].Heartbeat(ctx, gens[1]); !errors.Is(err, kafkaio.ErrGroupFenced) || !kafkaio.Fenced(err) {
			t.Fatalf("heartbeat of the replaced static member: %v, want ErrGroupFenced", err)
		}
		ms[1], gens[1] = restarted, g

		// A third member joins: the others are asked to rejoin, and the partitions are split
		// three ways; the dynamic member's departure splits them between the two left.
		third := groupMember(b, false, 2)
		gens = rejoin(t, ctx, gens, ms, third)
		ms = append(ms, third)
		checkSplit(t, 4, gens...)
		if err := ms[2].Leave(ctx); err != nil {
			t.Fatal(err)
		}
		gens = rejoin(t, ctx, gens[:2], ms[:2])
		checkSplit(t, 4, gens...)
		if err := ms[1].Leave(ctx); err != nil { // static: stays a member
			t.Fatal(err)
		}
		if err := ms[0].Heartbeat(ctx, gens[0]); err != nil {
			t.Fatalf("a static member's Leave started a rebalance: %v", err)
		}
	})
}

// TestStickyAdopt proves that a StickyBalancer that adopts another's user data joins with the
// same bytes, which is what lets a restarted static member rejoin without a rebalance.
func TestStickyAdopt(t *testing.T) {
	var old, restarted kafkaio.StickyBalancer
	old.SetOwned(7, map[string][]int{"t": {3, 1}, "u": {0}})
	want, _ := old.UserData()
	restarted.Adopt(want)
	if got, _ := restarted.UserData(); !bytes.Equal(got, want) {
		t.Fatalf("user data after Adopt %x, want %x", got, want)
	}
	restarted.Adopt([]byte{0xff}) // unreadable: claims nothing
	if got, _ := restarted.UserData(); bytes.Equal(got, want) {
		t.Fatal("unreadable user data kept the old claims")
	}
}

// TestTxnOffsetCommitEpoch proves on each broker that an offset committed inside a transaction
// keeps the leader epoch sent with it (TxnOffsetCommit exchanged raw; kafka-go's sends 0), and
// that CommittedOffsets reads it back with the offset, -1 for a partition without one.
func TestTxnOffsetCommitEpoch(t *testing.T) {
	testbroker.Each(t, testbroker.Options{Topics: map[string]int32{"t": 2}}, func(t *testing.T, b testbroker.Broker) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		client := kafkaio.Conn{Brokers: b.Addrs()}.Client(10 * time.Second)
		defer kafkaio.CloseIdle(client)
		p := kafkaio.NewProducer(client, kafkaio.ProducerConfig{TransactionalID: b.Name("txn-epoch")})
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Begin(); err != nil {
			t.Fatal(err)
		}
		want := kafkaio.Committed{Offset: 7, LeaderEpoch: 3}
		if err := p.SendOffsets(ctx, b.Name("g"), b.Name("t"), map[int]kafkaio.Committed{1: want}); err != nil {
			t.Fatal(err)
		}
		if err := p.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		// The commit's markers are written after EndTxn returns: the offset shows once they are.
		var got map[int]kafkaio.Committed
		for got == nil || got[1].Offset < 0 {
			var err error
			if got, err = kafkaio.CommittedOffsets(ctx, client, b.Name("g"), b.Name("t"), []int{0, 1}); err != nil {
				t.Fatal(err)
			}
			if got[1].Offset < 0 && !kafkaio.Sleep(ctx, 10*time.Millisecond) {
				t.Fatal("the transaction's offset never showed")
			}
		}
		if none := (kafkaio.Committed{Offset: -1, LeaderEpoch: -1}); got[1] != want || got[0] != none {
			t.Errorf("committed %v, want partition 1 at %+v and partition 0 at %+v", got, want, none)
		}
	})
}

// coopMember returns a member of group g on topic t of b that offers the cooperative protocol
// when coop (and the eager ones after it either way).
func coopMember(b testbroker.Broker, coop bool) *kafkaio.GroupMember {
	cfg := kafkaio.GroupConfig{Group: b.Name("g"), Topic: b.Name("t"), SessionTimeout: 10 * time.Second,
		RebalanceTimeout: 20 * time.Second, Sticky: &kafkaio.StickyBalancer{}, Cooperative: coop}
	return kafkaio.NewGroupMember(kafkaio.Conn{Brokers: b.Addrs()}.Client(10*time.Second), cfg)
}

// TestCooperativeScaleOut proves on each broker the cooperative protocol's scale-out: a third
// member joins two; in the first rebalance the old members keep every partition they keep for
// good, and no partition is given to the newcomer while its owner holds it; the members that lost
// partitions rejoin at once, and the second rebalance hands them to the newcomer. A member that
// offers only eager protocols (an older version) makes the group agree on an eager one.
func TestCooperativeScaleOut(t *testing.T) {
	testbroker.Each(t, testbroker.Options{Topics: map[string]int32{"t": 12}}, func(t *testing.T, b testbroker.Broker) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ms := []*kafkaio.GroupMember{coopMember(b, true), coopMember(b, true)}
		gens := joinAll(t, ctx, ms[0])
		gens = rejoin(t, ctx, gens, ms[:1], ms[1])
		checkSplit(t, 12, gens...)
		for i, g := range gens {
			if !g.Cooperative || g.Protocol != kafkaio.CooperativeProtocol {
				t.Fatalf("member %d: generation %+v, want the cooperative protocol", i, g)
			}
			ms[i].Own(g.ID, g.Partitions)
		}
		before := [][]int{gens[0].Partitions, gens[1].Partitions}

		ms = append(ms, coopMember(b, true))
		first := rejoin(t, ctx, gens, ms[:2], ms[2])
		owner := map[int]int{}
		for i, g := range first {
			for _, p := range g.Partitions {
				owner[p] = i
			}
		}
		revoked := 0
		for i := range 2 {
			for _, p := range before[i] {
				if o, ok := owner[p]; ok && o != i {
					t.Fatalf("partition %d given to member %d in the generation that takes it from member %d: %+v", p, o, i, first)
				}
				if _, ok := owner[p]; !ok {
					revoked++
				}
			}
			if len(first[i].Partitions) < 4 {
				t.Fatalf("member %d kept %v of %v, want at least 4", i, first[i].Partitions, before[i])
			}
			ms[i].Own(first[i].ID, first[i].Partitions)
		}
		if len(first[2].Partitions) != 0 || revoked != 4 {
			t.Fatalf("first rebalance: newcomer got %v and %d partitions were revoked, want none and 4: %+v", first[2].Partitions, revoked, first)
		}
		// The members that revoked rejoin at once (their subscription changed), which starts the
		// second rebalance.
		second := joinAll(t, ctx, ms...)
		checkSplit(t, 12, second...)
		for i, g := range second {
			if len(g.Partitions) != 4 {
				t.Fatalf("second rebalance: member %d got %v, want 4: %+v", i, g.Partitions, second)
			}
			if i < 2 && !slices.Equal(g.Partitions, first[i].Partitions) {
				t.Fatalf("second rebalance moved member %d's partitions from %v to %v", i, first[i].Partitions, g.Partitions)
			}
			ms[i].Own(g.ID, g.Partitions)
		}

		// An older member that offers only eager protocols: the group agrees on one.
		old := coopMember(b, false)
		mixed := rejoin(t, ctx, second, ms, old)
		for i, g := range mixed {
			if g.Cooperative || g.Protocol != kafkaio.StickyProtocol {
				t.Fatalf("mixed group: member %d in %+v, want the eager sticky protocol", i, g)
			}
		}
		checkSplit(t, 12, mixed...)
	})
}

// TestCooperativeStaticRestart proves on each broker that a static member of a cooperative group
// restarted in a new process (which adopts the owned partitions and sticky claims its instance id
// joined with) rejoins the generation it left, with its partitions: no rebalance. It restarts
// once after a rejoin that claimed the partitions, and once after the first join, whose
// subscription claimed nothing (as when two replicas start together).
func TestCooperativeStaticRestart(t *testing.T) {
	for _, rejoin := range []bool{true, false} {
		t.Run(map[bool]string{true: "claims", false: "first-join"}[rejoin], func(t *testing.T) {
			testbroker.Each(t, testbroker.Options{Topics: map[string]int32{"t": 4}}, func(t *testing.T, b testbroker.Broker) {
				staticRestart(t, b, rejoin)
			})
		})
	}
}

func staticRestart(t *testing.T, b testbroker.Broker, rejoin bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	member := func() (*kafkaio.GroupMember, *kafkaio.StickyBalancer) {
		sticky := &kafkaio.StickyBalancer{}
		cfg := kafkaio.GroupConfig{Group: b.Name("g"), Topic: b.Name("t"), InstanceID: "s1", SessionTimeout: 10 * time.Second,
			RebalanceTimeout: 20 * time.Second, Sticky: sticky, Cooperative: true}
		return kafkaio.NewGroupMember(kafkaio.Conn{Brokers: b.Addrs()}.Client(10*time.Second), cfg), sticky
	}
	m, sticky := member()
	g, err := m.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// As the Worker does: claim what the generation gave (which the next JoinGroup sends).
	m.Own(g.ID, g.Partitions)
	sticky.SetOwned(g.ID, map[string][]int{b.Name("t"): g.Partitions})
	if rejoin {
		if g, err = m.Join(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !g.Cooperative || len(g.Partitions) != 4 {
		t.Fatalf("generation %+v, want the cooperative protocol and all 4 partitions", g)
	}
	restarted, _ := member()
	got, err := restarted.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != g.ID || !slices.Equal(got.Partitions, g.Partitions) {
		t.Fatalf("restarted static member joined %+v, want generation %d with %v", got, g.ID, g.Partitions)
	}
}
