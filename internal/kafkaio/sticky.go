package kafkaio

import (
	"cmp"
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"sync"

	"github.com/segmentio/kafka-go"
)

// StickyProtocol is the consumer group protocol name of StickyBalancer.
const StickyProtocol = "kdedup-sticky"

// stickyVersion is the version of the UserData StickyBalancer writes.
// Compatibility rule: a later version only appends fields after the
// version-1 layout, so every version can read the claims of every other.
const stickyVersion = 1

// StickyBalancer is a kafka-go GroupBalancer that keeps partitions with the
// members that own them, so a member joining or leaving a group of K moves
// about 1/K of the partitions instead of most of them, and so most
// partitions keep their filter in memory across a rebalance.
//
// Every member carries, in its JoinGroup UserData, the partitions it
// consumed in its last generation and that generation's number (see
// SetOwned). The group leader's AssignGroups then, per topic:
//
//  1. resolves claims: a partition claimed by several members (after a
//     crash and rejoin, say) goes to the claim of the newest generation, ties
//     to the member ID that sorts first; claims of partitions that do not
//     exist are ignored, as is UserData that cannot be read (it counts as no
//     claims) or that has a newer version (its version-1 part is read);
//  2. gives every member a quota of ⌊P/M⌋ or ⌈P/M⌉ partitions (P partitions,
//     M members), the larger quotas going to the members holding the most
//     claims (ties by member ID), so loads differ by at most one;
//  3. lets each member keep its claimed partitions up to its quota (the
//     lowest-numbered ones), and hands every other partition, in order, to
//     the member with the most room left (ties by member ID).
//
// AssignGroups is a pure, deterministic function of the members' IDs,
// topics and UserData and of the partitions, whatever their order. A member
// joining a group of two moves at most ⌊P/3⌋ partitions: the two old members
// keep theirs up to the new quotas.
//
// Its protocol is eager: every member revokes everything at the end of each
// generation (CooperativeProtocol applies the same rules incrementally, with
// the owned partitions of the subscription as claims). List a protocol every
// member version supports, such as
// kafka.RangeGroupBalancer, after this one so that a group mixing members
// with and without StickyBalancer still agrees (on the fallback). A
// StickyBalancer is safe for concurrent use; its zero value claims nothing.
type StickyBalancer struct {
	mu         sync.Mutex
	generation int32
	owned      map[string][]int
}

var _ kafka.GroupBalancer = (*StickyBalancer)(nil)

// ProtocolName returns StickyProtocol.
func (b *StickyBalancer) ProtocolName() string { return StickyProtocol }

// SetOwned records the partitions per topic the member got in generation,
// to be claimed at its next JoinGroup. The consumer's Worker calls it at the start of
// every generation; kafka-go reads UserData when it joins the next one,
// after the current generation (and its partitions) ended.
func (b *StickyBalancer) SetOwned(generation int32, owned map[string][]int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.generation = generation
	b.owned = make(map[string][]int, len(owned))
	for t, ps := range owned {
		b.owned[t] = slices.Clone(ps)
	}
}

// Adopt takes over the claims in userData (written by UserData), as a static
// member restarted in a new process does with the ones its previous
// incarnation joined with (see GroupMember.Join): its next UserData is the
// same, so the coordinator sees an unchanged subscription and hands the
// member its partitions back without a rebalance. UserData that cannot be
// read claims nothing.
func (b *StickyBalancer) Adopt(userData []byte) {
	c := decodeClaims(userData)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.generation, b.owned = c.generation, c.owned
}

// UserData returns the member's claims, encoded (see encodeClaims). It never
// fails.
func (b *StickyBalancer) UserData() ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return encodeClaims(claims{generation: b.generation, owned: b.owned}), nil
}

// AssignGroups implements kafka.GroupBalancer; see StickyBalancer.
func (b *StickyBalancer) AssignGroups(members []kafka.GroupMember, partitions []kafka.Partition) kafka.GroupMemberAssignments {
	out := kafka.GroupMemberAssignments{}
	byTopic := map[string][]string{} // topic → subscribed member IDs
	cl := make(map[string]claims, len(members))
	for _, m := range members {
		out[m.ID] = map[string][]int{}
		cl[m.ID] = decodeClaims(m.UserData)
		for _, t := range m.Topics {
			if !slices.Contains(byTopic[t], m.ID) {
				byTopic[t] = append(byTopic[t], m.ID)
			}
		}
	}
	parts := map[string][]int{}
	for _, p := range partitions {
		parts[p.Topic] = append(parts[p.Topic], p.ID)
	}
	for _, topic := range slices.Sorted(maps.Keys(byTopic)) {
		ids := slices.Clone(byTopic[topic])
		slices.Sort(ids)
		ps := slices.Compact(slices.Sorted(slices.Values(parts[topic])))
		for id, got := range assignTopic(topic, ids, ps, cl) {
			out[id][topic] = got
		}
	}
	return out
}

// assignTopic assigns the sorted partitions of one topic to the sorted
// member IDs; see StickyBalancer for the rules.
func assignTopic(topic string, ids []string, partitions []int, cl map[string]claims) map[string][]int {
	if len(ids) == 0 {
		return nil
	}
	owner := winningClaims(topic, ids, partitions, cl)
	won := map[string][]int{}
	for _, p := range partitions { // ascending, so won lists are sorted
		if m, ok := owner[p]; ok {
			won[m] = append(won[m], p)
		}
	}
	quota := quotas(ids, len(partitions), won)
	result := make(map[string][]int, len(ids))
	var pool []int
	for _, id := range ids {
		w := won[id]
		k := min(len(w), quota[id])
		result[id] = slices.Clone(w[:k])
		pool = append(pool, w[k:]...)
	}
	for _, p := range partitions {
		if _, ok := owner[p]; !ok {
			pool = append(pool, p)
		}
	}
	slices.Sort(pool)
	for _, p := range pool {
		best := ""
		for _, id := range ids { // the most room left; ties to the first ID
			if room := quota[id] - len(result[id]); room > 0 && (best == "" || room > quota[best]-len(result[best])) {
				best = id
			}
		}
		result[best] = append(result[best], p)
	}
	for _, id := range ids {
		slices.Sort(result[id])
	}
	return result
}

// winningClaims maps each claimed, existing partition to the member whose
// claim wins: the newest generation, ties to the first ID in ids.
func winningClaims(topic string, ids []string, partitions []int, cl map[string]claims) map[int]string {
	owner := map[int]string{}
	gen := map[int]int32{}
	for _, id := range ids {
		c := cl[id]
		for _, p := range c.owned[topic] {
			if _, exists := slices.BinarySearch(partitions, p); !exists {
				continue
			}
			if cur, ok := owner[p]; !ok || c.generation > gen[p] {
				owner[p], gen[p] = id, c.generation
			} else if c.generation == gen[p] && id < cur {
				owner[p] = id
			}
		}
	}
	return owner
}

// quotas gives each member ⌊n/M⌋ partitions, plus one for the n mod M
// members that won the most claims (ties by ID).
func quotas(ids []string, n int, won map[string][]int) map[string]int {
	order := slices.Clone(ids)
	slices.SortStableFunc(order, func(a, b string) int { return cmp.Compare(len(won[b]), len(won[a])) })
	q := make(map[string]int, len(ids))
	for i, id := range order {
		q[id] = n / len(ids)
		if i < n%len(ids) {
			q[id]++
		}
	}
	return q
}

// claims are the partitions a member says it owned in a generation.
type claims struct {
	generation int32
	owned      map[string][]int
}

// encodeClaims writes the UserData of StickyBalancer, big-endian:
//
//	1 byte    version (1)
//	4 bytes   generation (int32) of the claims
//	2 bytes   topic count T, then T times:
//	          2 bytes name length, the name,
//	          4 bytes partition count N, then N int32 partition IDs
//
// Topics are written in name order, partitions in ascending order.
func encodeClaims(c claims) []byte {
	b := []byte{stickyVersion}
	b = binary.BigEndian.AppendUint32(b, uint32(c.generation))
	// A topic with no partitions is left out, so that claiming none of a topic's partitions
	// and not naming it encode alike (a static member's adopted claims must match its last
	// JoinGroup's bytes).
	topics := slices.DeleteFunc(slices.Sorted(maps.Keys(c.owned)), func(t string) bool { return len(c.owned[t]) == 0 })
	b = binary.BigEndian.AppendUint16(b, uint16(len(topics)))
	for _, t := range topics {
		b = binary.BigEndian.AppendUint16(b, uint16(len(t)))
		b = append(b, t...)
		ps := slices.Sorted(slices.Values(c.owned[t]))
		b = binary.BigEndian.AppendUint32(b, uint32(len(ps)))
		for _, p := range ps {
			b = binary.BigEndian.AppendUint32(b, uint32(int32(p)))
		}
	}
	return b
}

var errShortClaims = errors.New("kafkaio: sticky user data truncated")

// decodeClaims reads UserData written by encodeClaims, or by a later
// version (whose appended fields it ignores). Anything it cannot read —
// empty, version 0, truncated, lengths that overrun the data — yields no
// claims; it never panics and allocates no more than the data's size.
func decodeClaims(data []byte) claims {
	c, err := parseClaims(data)
	if err != nil {
		return claims{}
	}
	return c
}

func parseClaims(data []byte) (claims, error) {
	r := claimReader{b: data}
	if v := r.bytes(1); r.err != nil || v[0] < 1 {
		return claims{}, errShortClaims
	}
	c := claims{generation: int32(r.u32()), owned: map[string][]int{}}
	topics := int(r.u16())
	for i := 0; i < topics && r.err == nil; i++ {
		name := string(r.bytes(int(r.u16())))
		n := int(r.u32())
		if n > len(r.b)/4 {
			return claims{}, errShortClaims
		}
		ps := make([]int, 0, n)
		for j := 0; j < n; j++ {
			ps = append(ps, int(int32(r.u32())))
		}
		c.owned[name] = ps
	}
	return c, r.err
}

// claimReader reads big-endian fields, remembering the first overrun.
type claimReader struct {
	b   []byte
	err error
}

func (r *claimReader) bytes(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.err = errShortClaims
		return make([]byte, min(max(n, 0), 4)) // enough for the fixed-size reads; never sized by garbage
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *claimReader) u16() uint16 { return binary.BigEndian.Uint16(r.bytes(2)) }
func (r *claimReader) u32() uint32 { return binary.BigEndian.Uint32(r.bytes(4)) }
