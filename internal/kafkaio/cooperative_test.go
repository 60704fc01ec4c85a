package kafkaio

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// coopGroup plays the cooperative protocol as the members and the leader do: every round, each
// member subscribes with the partitions it owns (through the real subscription encoding), the
// leader assigns, and each member revokes what it owns and was not given, keeps the rest and takes
// what is new. It checks in every round that no partition is given to a member while another one
// owns it.
type coopGroup struct {
	t     *testing.T
	p     int
	gen   int32
	owned map[string][]int // member → partitions it owns
	// revoked counts, per member, the partitions it gave up over all rounds.
	revoked map[string]int
}

func newCoopGroup(t *testing.T, p int, ids ...string) *coopGroup {
	g := &coopGroup{t: t, p: p, owned: map[string][]int{}, revoked: map[string]int{}}
	for _, id := range ids {
		g.owned[id] = nil
	}
	return g
}

// round is one rebalance; it returns whether any member revoked a partition (and so rejoins).
func (g *coopGroup) round() bool {
	g.t.Helper()
	g.gen++
	var gms []kafka.GroupMember
	for _, id := range slices.Sorted(maps.Keys(g.owned)) {
		sub := coopSubscription(balTopic, g.gen-1, g.owned[id])
		var meta kmsg.ConsumerMemberMetadata
		if err := meta.ReadFrom(sub.AppendTo(nil)); err != nil {
			g.t.Fatal(err)
		}
		gms = append(gms, kafka.GroupMember{ID: id, Topics: meta.Topics, UserData: ownedClaims(&meta)})
	}
	got := flatten(cooperativeBalancer{}.AssignGroups(gms, topicPartitions(g.p)))
	owner := map[int]string{}
	for id, ps := range g.owned {
		for _, p := range ps {
			owner[p] = id
		}
	}
	seen := map[int]string{}
	for id, ps := range got {
		for _, p := range ps {
			if o, ok := owner[p]; ok && o != id {
				g.t.Fatalf("generation %d gives partition %d to %s while %s owns it: %v (owned %v)", g.gen, p, id, o, got, g.owned)
			}
			if o, ok := seen[p]; ok {
				g.t.Fatalf("generation %d gives partition %d to %s and %s", g.gen, p, o, id)
			}
			seen[p] = id
		}
	}
	any := false
	for id := range g.owned {
		for _, p := range g.owned[id] {
			if !slices.Contains(got[id], p) {
				g.revoked[id]++
				any = true
			}
		}
		g.owned[id] = slices.Clone(got[id])
	}
	return any
}

// settle runs rounds until no member revokes anything, at most limit, and returns how many ran.
func (g *coopGroup) settle(limit int) int {
	g.t.Helper()
	for n := 1; ; n++ {
		if !g.round() {
			return n
		}
		if n == limit {
			g.t.Fatalf("no stable assignment after %d rebalances: %v", limit, g.owned)
		}
	}
}

func (g *coopGroup) join(id string)  { g.owned[id] = nil }
func (g *coopGroup) leave(id string) { delete(g.owned, id) }

func TestCooperativeJoinKeepsStayingPartitions(t *testing.T) {
	for _, p := range []int{1, 2, 3, 5, 12, 13, 64} {
		for _, newcomer := range []string{"a", "m", "z"} {
			t.Run(fmt.Sprintf("P%d/+%s", p, newcomer), func(t *testing.T) {
				g := newCoopGroup(t, p, "b", "y")
				if n := g.settle(2); n != 1 {
					t.Fatalf("the first assignment took %d rebalances", n)
				}
				checkBalanced(t, g.owned, p)
				before := maps.Clone(g.owned)
				g.join(newcomer)
				n := g.settle(3)
				checkBalanced(t, g.owned, p)
				mv := moved(before, g.owned)
				if limit := (p+2)/3 + 1; mv > limit || mv != len(g.owned[newcomer]) {
					t.Fatalf("%d partitions moved (newcomer got %d), want at most %d: %v → %v", mv, len(g.owned[newcomer]), limit, before, g.owned)
				}
				if want := min(2, 1+mv); n != want {
					t.Fatalf("%d rebalances, want %d (a second one only to hand out what was revoked)", n, want)
				}
				// A member revokes exactly what it lost: the partitions that stay are never revoked.
				for _, id := range []string{"b", "y"} {
					if lost := len(before[id]) - len(g.owned[id]); g.revoked[id] != lost {
						t.Fatalf("%s revoked %d partitions and lost %d", id, g.revoked[id], lost)
					}
				}
			})
		}
	}
}

func TestCooperativeLeave(t *testing.T) {
	for _, p := range []int{1, 4, 12, 13} {
		t.Run(fmt.Sprint("P", p), func(t *testing.T) {
			g := newCoopGroup(t, p, "a", "b", "c")
			g.settle(2)
			before := maps.Clone(g.owned)
			g.leave("c")
			// The leaver's partitions are owned by nobody: one rebalance hands them out.
			if n := g.settle(2); n != 1 {
				t.Fatalf("%d rebalances after a member left, want 1", n)
			}
			checkBalanced(t, g.owned, p)
			if mv := moved(before, g.owned); mv != len(before["c"]) {
				t.Fatalf("%d partitions moved, want c's %d: %v → %v", mv, len(before["c"]), before, g.owned)
			}
			if g.revoked["a"]+g.revoked["b"] != 0 {
				t.Fatalf("the staying members revoked partitions: %v", g.revoked)
			}
		})
	}
}

func TestCooperativeChurn(t *testing.T) {
	g := newCoopGroup(t, 12, "a")
	g.settle(2)
	for i, step := range []func(){
		func() { g.join("b") }, func() { g.join("c") }, func() { g.join("d") }, func() { g.leave("a") },
		func() { g.leave("c") }, func() { g.join("a"); g.join("e") }, func() { g.leave("b"); g.leave("d") },
	} {
		step()
		g.settle(3)
		checkBalanced(t, g.owned, 12)
		t.Logf("step %d: %v", i, g.owned)
	}
}

// TestCooperativeDoubleClaim: a member that missed a generation still claims a partition that
// another member got since; the newer claim keeps it, the stale one revokes it, and no third member
// gets it while either claims it.
func TestCooperativeDoubleClaim(t *testing.T) {
	claim := func(id string, gen int32, owned ...int) kafka.GroupMember {
		meta := coopSubscription(balTopic, gen, owned)
		return kafka.GroupMember{ID: id, Topics: []string{balTopic}, UserData: ownedClaims(&meta)}
	}
	got := flatten(cooperativeBalancer{}.AssignGroups([]kafka.GroupMember{
		claim("a", 5, 0, 1, 2, 3), claim("b", 7, 3, 4, 5), claim("c", 7)}, topicPartitions(6)))
	if slices.Contains(got["a"], 3) || !slices.Contains(got["b"], 3) {
		t.Fatalf("partition 3 claimed by a (generation 5) and b (7): %v, want it with b", got)
	}
	for _, p := range []int{0, 1, 2, 4, 5} {
		if slices.Contains(got["c"], p) {
			t.Fatalf("c got partition %d, which another member owns: %v", p, got)
		}
	}
	// Unreadable or v0 subscriptions claim nothing.
	v0 := kmsg.ConsumerMemberMetadata{Topics: []string{balTopic}}
	if c := decodeClaims(ownedClaims(&v0)); len(c.owned) != 0 {
		t.Fatalf("a v0 subscription claims %v", c.owned)
	}
}
