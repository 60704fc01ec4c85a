package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/segmentio/kafka-go"
)

// Member names a consumer group member in one generation, for CheckMember.
type Member struct {
	// Group is the consumer group ID.
	Group string
	// Generation and ID are the member's generation and member ID, as kafka.Generation has them.
	Generation int32
	ID         string
}

// Fenced reports whether err says that a consumer group member lost its generation: the
// coordinator no longer knows the member (UNKNOWN_MEMBER_ID, after a session expiry for example),
// the generation moved on (ILLEGAL_GENERATION), or a static member with the same instance id
// replaced it (FENCED_INSTANCE_ID). The partitions of that generation may then belong to another
// member already. REBALANCE_IN_PROGRESS is not fenced: the coordinator waits for the member to
// rejoin before it hands its partitions on.
func Fenced(err error) bool {
	return errors.Is(err, kafka.UnknownMemberId) || errors.Is(err, kafka.IllegalGeneration) ||
		errors.Is(err, kafka.FencedInstanceID)
}

// CheckMember sends one heartbeat for member to its group's coordinator, through client, and
// returns nil when the coordinator still counts the member in its generation (it answered with no
// error or REBALANCE_IN_PROGRESS), an error for which Fenced is true when it does not, and another
// error when the coordinator could not be asked. A successful answer renews the member's session,
// so the member's partitions cannot be handed on before a session timeout from the call.
func CheckMember(ctx context.Context, client *kafka.Client, member Member) error {
	res, err := client.FindCoordinator(ctx, &kafka.FindCoordinatorRequest{Key: member.Group, KeyType: kafka.CoordinatorKeyTypeConsumer})
	if err == nil {
		err = res.Error
	}
	if err == nil && res.Coordinator == nil {
		err = errors.New("no coordinator in the answer")
	}
	if err != nil {
		return fmt.Errorf("kafkaio: finding the coordinator of group %q: %w", member.Group, err)
	}
	addr := kafka.TCP(net.JoinHostPort(res.Coordinator.Host, strconv.Itoa(res.Coordinator.Port)))
	err = heartbeat(ctx, client, addr, member)
	if err == nil || errors.Is(err, kafka.RebalanceInProgress) {
		return nil
	}
	return fmt.Errorf("kafkaio: heartbeat of group %q generation %d: %w", member.Group, member.Generation, err)
}

// heartbeat sends one heartbeat for member to coordinator and returns the error it got, the
// answer's included.
func heartbeat(ctx context.Context, client *kafka.Client, coordinator net.Addr, member Member) error {
	res, err := client.Heartbeat(ctx, &kafka.HeartbeatRequest{
		Addr: coordinator, GroupID: member.Group, GenerationID: member.Generation, MemberID: member.ID,
	})
	if err == nil {
		err = res.Error
	}
	return err
}
