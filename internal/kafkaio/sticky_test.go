package kafkaio

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/segmentio/kafka-go"
)

// The sticky balancer as a pure function: members (ID, claims) and
// partitions in, assignments out.

const balTopic = "in"

// member is a group member of the tests: ID, and the partitions of balTopic
// it claims from generation gen (nil: no claims, empty UserData).
type member struct {
	id    string
	gen   int32
	owned []int
	raw   []byte // when set, the UserData as is
}

func (m member) groupMember() kafka.GroupMember {
	ud := m.raw
	if ud == nil && m.owned != nil {
		ud = encodeClaims(claims{generation: m.gen, owned: map[string][]int{balTopic: m.owned}})
	}
	return kafka.GroupMember{ID: m.id, Topics: []string{balTopic}, UserData: ud}
}

func topicPartitions(n int) []kafka.Partition {
	ps := make([]kafka.Partition, n)
	for i := range ps {
		ps[i] = kafka.Partition{Topic: balTopic, ID: i}
	}
	return ps
}

// assign runs the balancer and returns member → partitions of balTopic,
// after checking that the result does not depend on the order of members
// and partitions.
func assign(t *testing.T, members []member, p int) map[string][]int {
	t.Helper()
	gms := make([]kafka.GroupMember, len(members))
	for i, m := range members {
		gms[i] = m.groupMember()
	}
	parts := topicPartitions(p)
	want := flatten(new(StickyBalancer).AssignGroups(gms, parts))
	rng := rand.New(rand.NewPCG(uint64(p), uint64(len(members))))
	for range 4 {
		rng.Shuffle(len(gms), func(i, j int) { gms[i], gms[j] = gms[j], gms[i] })
		rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
		if got := flatten(new(StickyBalancer).AssignGroups(gms, parts)); !maps.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("result depends on input order:\n%v\n%v", got, want)
		}
	}
	checkBalanced(t, want, p)
	return want
}

func flatten(a kafka.GroupMemberAssignments) map[string][]int {
	out := map[string][]int{}
	for id, topics := range a {
		out[id] = topics[balTopic]
	}
	return out
}

// checkBalanced checks that every partition is assigned exactly once and
// that loads differ by at most one.
func checkBalanced(t *testing.T, a map[string][]int, p int) {
	t.Helper()
	seen := make([]int, p)
	lo, hi := p, 0
	for _, ps := range a {
		lo, hi = min(lo, len(ps)), max(hi, len(ps))
		for _, x := range ps {
			seen[x]++
		}
	}
	for x, n := range seen {
		if n != 1 {
			t.Fatalf("partition %d assigned %d times: %v", x, n, a)
		}
	}
	if len(a) > 0 && hi-lo > 1 {
		t.Fatalf("loads from %d to %d: %v", lo, hi, a)
	}
}

// moved counts the partitions whose owner differs between two assignments.
func moved(before, after map[string][]int) int {
	owner := map[int]string{}
	for id, ps := range before {
		for _, x := range ps {
			owner[x] = id
		}
	}
	n := 0
	for id, ps := range after {
		for _, x := range ps {
			if owner[x] != id {
				n++
			}
		}
	}
	return n
}

// claimsOf turns an assignment into members claiming it in generation gen.
func claimsOf(a map[string][]int, gen int32) []member {
	var ms []member
	for _, id := range slices.Sorted(maps.Keys(a)) {
		ms = append(ms, member{id: id, gen: gen, owned: append([]int{}, a[id]...)})
	}
	return ms
}

func TestStickyJoinMovesAThird(t *testing.T) {
	// Several ID orders: the newcomer's ID sorts first, last, in between.
	idSets := [][3]string{{"a", "b", "c"}, {"b", "c", "a"}, {"m-2", "m-9", "m-5"}, {"z", "y", "x"}}
	for p := 1; p <= 64; p++ {
		for _, ids := range idSets {
			t.Run(fmt.Sprintf("P%d/%s%s+%s", p, ids[0], ids[1], ids[2]), func(t *testing.T) {
				two := assign(t, []member{{id: ids[0]}, {id: ids[1]}}, p) // first start: no claims
				three := assign(t, append(claimsOf(two, 7), member{id: ids[2]}), p)
				limit := (p+2)/3 + 1 // ⌈P/3⌉+1
				if n := moved(two, three); n > limit || n != len(three[ids[2]]) {
					t.Fatalf("%d partitions moved (newcomer got %d), want at most %d:\n%v\n%v", n, len(three[ids[2]]), limit, two, three)
				}
				// A stable group moves nothing.
				if again := assign(t, claimsOf(three, 8), p); moved(three, again) != 0 {
					t.Fatalf("a rebalance without membership change moved partitions:\n%v\n%v", three, again)
				}
			})
		}
	}
}

func TestStickyLeaveSpreads(t *testing.T) {
	for _, p := range []int{1, 2, 5, 12, 13, 64} {
		t.Run(fmt.Sprint("P", p), func(t *testing.T) {
			four := assign(t, []member{{id: "a"}, {id: "b"}, {id: "c"}, {id: "d"}}, p)
			rest := claimsOf(four, 3)[:3] // "d" leaves
			three := assign(t, rest, p)
			if n := moved(four, three); n != len(four["d"]) {
				t.Fatalf("%d partitions moved, want only d's %d:\n%v\n%v", n, len(four["d"]), four, three)
			}
		})
	}
}

func TestStickyConflictingClaims(t *testing.T) {
	tests := []struct {
		name    string
		members []member
		p       int
		want    map[string][]int
	}{
		{"newer generation wins", []member{
			{id: "a", gen: 4, owned: []int{0, 1, 2, 3}}, // crashed in generation 4 and rejoined
			{id: "b", gen: 6, owned: []int{0, 1}},
			{id: "c", gen: 6, owned: []int{2, 3}},
		}, 6, map[string][]int{"a": {4, 5}, "b": {0, 1}, "c": {2, 3}}},
		{"same generation: first ID wins", []member{
			{id: "b", gen: 5, owned: []int{0, 1}},
			{id: "a", gen: 5, owned: []int{1, 2}},
		}, 4, map[string][]int{"a": {1, 2}, "b": {0, 3}}},
		{"claims beyond the partition count are ignored", []member{
			{id: "a", gen: 2, owned: []int{0, 7, 9, -1}},
			{id: "b", gen: 2, owned: []int{1}},
		}, 4, map[string][]int{"a": {0, 2}, "b": {1, 3}}},
		{"over-claiming member keeps its quota", []member{
			{id: "a", gen: 2, owned: []int{0, 1, 2, 3, 4, 5}},
			{id: "b"},
			{id: "c"},
		}, 6, map[string][]int{"a": {0, 1}, "b": {2, 4}, "c": {3, 5}}}, // the most room first, ties by ID
		{"more members than partitions", []member{
			{id: "a"}, {id: "b", gen: 1, owned: []int{1}}, {id: "c"},
		}, 2, map[string][]int{"a": {0}, "b": {1}, "c": nil}},
		{"no partitions", []member{{id: "a", gen: 1, owned: []int{0}}}, 0, map[string][]int{"a": nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := assign(t, tc.members, tc.p)
			if !maps.EqualFunc(got, tc.want, func(a, b []int) bool { return slices.Equal(a, b) || len(a)+len(b) == 0 }) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStickyUserData(t *testing.T) {
	valid := encodeClaims(claims{generation: 9, owned: map[string][]int{balTopic: {3, 1, 2}, "other": {0}}})
	newer := append([]byte{7}, valid[1:]...) // version 7: the version-1 fields, then more
	newer = append(newer, 0xde, 0xad, 0xbe, 0xef)
	huge := encodeClaims(claims{generation: 1, owned: map[string][]int{balTopic: {0}}})
	huge[len(huge)-8] = 0x7f // partition count ~2^31 with 4 bytes left
	tests := []struct {
		name string
		ud   []byte
		want []int // claims on balTopic; nil: none
	}{
		{"valid", valid, []int{1, 2, 3}},
		{"newer version", newer, []int{1, 2, 3}},
		{"nil", nil, nil},
		{"empty", []byte{}, nil},
		{"version 0", append([]byte{0}, valid[1:]...), nil},
		{"range balancer's (none)", nil, nil},
		{"rack name", []byte("eu-west-1a"), nil},
		{"truncated", valid[:len(valid)-3], nil},
		{"huge count", huge, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := decodeClaims(tc.ud).owned[balTopic]; !slices.Equal(got, tc.want) {
				t.Fatalf("claims %v, want %v", got, tc.want)
			}
			// Whatever the UserData, the member is assigned its share.
			a := assign(t, []member{{id: "x", raw: tc.ud}, {id: "y", gen: 1, owned: []int{0}}}, 4)
			if len(a["x"]) != 2 {
				t.Fatalf("member with this UserData got %v", a["x"])
			}
		})
	}
	var b StickyBalancer
	if ud, err := b.UserData(); err != nil || len(decodeClaims(ud).owned) != 0 {
		t.Fatalf("zero StickyBalancer UserData = %v, %v", ud, err)
	}
	b.SetOwned(12, map[string][]int{balTopic: {5, 4}})
	ud, _ := b.UserData()
	if c := decodeClaims(ud); c.generation != 12 || !slices.Equal(c.owned[balTopic], []int{4, 5}) {
		t.Fatalf("claims after SetOwned = %+v", c)
	}
}

func FuzzStickyUserData(f *testing.F) {
	f.Add(encodeClaims(claims{generation: 3, owned: map[string][]int{balTopic: {0, 2}}}))
	f.Add([]byte{1, 0, 0, 0, 1, 0, 1, 0, 2, 'i', 'n', 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, ud []byte) {
		a := flatten(new(StickyBalancer).AssignGroups(
			[]kafka.GroupMember{{ID: "a", Topics: []string{balTopic}, UserData: ud}, {ID: "b", Topics: []string{balTopic}}},
			topicPartitions(5)))
		checkBalanced(t, a, 5)
		if c, err := parseClaims(ud); err == nil {
			if again := decodeClaims(encodeClaims(c)); !maps.EqualFunc(again.owned, c.owned, func(x, y []int) bool {
				return slices.Equal(x, slices.Sorted(slices.Values(y))) // encoding sorts
			}) || again.generation != c.generation {
				t.Fatalf("claims do not survive a round trip: %+v, %+v", c, again)
			}
		}
	})
}

// TestStickyTopics checks members subscribed to different topics and
// several topics at once.
func TestStickyTopics(t *testing.T) {
	members := []kafka.GroupMember{
		{ID: "a", Topics: []string{"x", "y"}},
		{ID: "b", Topics: []string{"y"}},
	}
	parts := []kafka.Partition{{Topic: "x", ID: 0}, {Topic: "x", ID: 1}, {Topic: "y", ID: 0}, {Topic: "y", ID: 1}, {Topic: "z", ID: 0}}
	got := new(StickyBalancer).AssignGroups(members, parts)
	want := kafka.GroupMemberAssignments{"a": {"x": {0, 1}, "y": {0}}, "b": {"y": {1}}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
