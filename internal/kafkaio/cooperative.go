package kafkaio

import (
	"maps"
	"slices"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Cooperative incremental rebalancing (KIP-429).
//
// Under the eager protocol every member gives up every partition before it rejoins, so a
// rebalance pauses the whole group, even the partitions that stay where they are. Under the
// cooperative protocol a member keeps its partitions through the rebalance and says which it owns
// in its subscription (the consumer protocol's owned partitions, v1+, with the generation they
// were owned in, v2+). The leader assigns stickily, and never gives a partition to a member other
// than its owner in the generation in which it takes it away: such a partition is left unassigned.
// Its owner revokes only what it lost and rejoins at once, so that the second rebalance, in which
// nobody owns it any more, hands it out. Partitions that stay are never stopped.

// CooperativeProtocol is the consumer group protocol name of the cooperative sticky balancer: the
// Java client's "cooperative-sticky", whose rules (owned partitions in the subscription, sticky,
// no handover within one generation) it follows.
const CooperativeProtocol = "cooperative-sticky"

// cooperativeBalancer is the leader's side of CooperativeProtocol. The members' owned partitions
// and generations reach AssignGroups encoded as StickyBalancer claims in UserData (GroupMember.assign
// translates the subscription), so the sticky rules are StickyBalancer's; what it adds is
// withhold. It is stateless and safe for concurrent use.
type cooperativeBalancer struct{}

var _ kafka.GroupBalancer = cooperativeBalancer{}

// ProtocolName returns CooperativeProtocol.
func (cooperativeBalancer) ProtocolName() string { return CooperativeProtocol }

// UserData returns none: the cooperative subscription carries the owned partitions in its own
// fields (GroupMember.joinRequest).
func (cooperativeBalancer) UserData() ([]byte, error) { return nil, nil }

// AssignGroups implements kafka.GroupBalancer: StickyBalancer's assignment of the members' claims,
// without the partitions that another member still owns (withhold).
func (cooperativeBalancer) AssignGroups(members []kafka.GroupMember, partitions []kafka.Partition) kafka.GroupMemberAssignments {
	out := (&StickyBalancer{}).AssignGroups(members, partitions)
	owned := make(map[string]map[string][]int, len(members))
	for _, m := range members {
		owned[m.ID] = decodeClaims(m.UserData).owned
	}
	return withhold(out, owned)
}

// withhold removes from every member's assignment the partitions it does not own but another
// member does (owned: member → topic → partitions, as the members' subscriptions claim them,
// whatever their generation): those move in the next rebalance, after their owners revoked them.
// A partition two members claim (a member that missed a generation, say) stays with the one the
// assignment gives it to if that one claims it, and is withheld otherwise.
func withhold(assigned kafka.GroupMemberAssignments, owned map[string]map[string][]int) kafka.GroupMemberAssignments {
	type tp struct {
		topic string
		p     int
	}
	owners := map[tp][]string{}
	for id, byTopic := range owned {
		for t, ps := range byTopic {
			for _, p := range ps {
				owners[tp{t, p}] = append(owners[tp{t, p}], id)
			}
		}
	}
	for id, byTopic := range assigned {
		for t, ps := range byTopic {
			byTopic[t] = slices.DeleteFunc(ps, func(p int) bool {
				o := owners[tp{t, p}]
				return len(o) > 0 && !slices.Contains(o, id)
			})
		}
		assigned[id] = byTopic
	}
	return assigned
}

// coopSubscription returns the member's cooperative subscription: topic, and the partitions it
// owns with the generation it owned them in (v2).
func coopSubscription(topic string, generation int32, owned []int) kmsg.ConsumerMemberMetadata {
	meta := kmsg.ConsumerMemberMetadata{Version: 2, Topics: []string{topic}, Generation: generation}
	if len(owned) > 0 {
		op := kmsg.ConsumerMemberMetadataOwnedPartition{Topic: topic}
		for _, p := range slices.Sorted(slices.Values(owned)) {
			op.Partitions = append(op.Partitions, int32(p))
		}
		meta.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{op}
	}
	return meta
}

// ownedClaims returns the owned partitions of a cooperative subscription as StickyBalancer
// claims, encoded; a v1 subscription (no generation) claims them in generation -1, so that any
// claim with a generation wins over it.
func ownedClaims(meta *kmsg.ConsumerMemberMetadata) []byte {
	c := claims{generation: -1, owned: map[string][]int{}}
	if meta.Version >= 2 {
		c.generation = meta.Generation
	}
	for _, op := range meta.OwnedPartitions {
		for _, p := range op.Partitions {
			c.owned[op.Topic] = append(c.owned[op.Topic], int(p))
		}
	}
	for t := range maps.Keys(c.owned) {
		slices.Sort(c.owned[t])
	}
	return encodeClaims(c)
}
