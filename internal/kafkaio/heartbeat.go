package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// Member names a consumer group member in one generation, for Heartbeats.
type Member struct {
	// Group is the consumer group ID.
	Group string
	// Generation and ID are the member's generation and member ID, as kafka.Generation has them.
	Generation int32
	ID         string
	// OnFenced, if set, is called by Heartbeats when the coordinator answers that the member or
	// its generation is gone (see Fenced).
	OnFenced func(error)
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

// Heartbeats heartbeats the group coordinator for member every interval, through client, until
// the returned stop is called (stop waits for it to finish). Failed heartbeats are logged to log
// (sampled; nil logs nowhere) and retried at the next tick, after the coordinator was looked up
// again. Heartbeats stop early once the coordinator no longer knows the member or the generation
// (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION). The coordinator answers REBALANCE_IN_PROGRESS during a
// rebalance and counts the heartbeat all the same.
//
// It fills a gap of kafka-go's ConsumerGroup: kafka-go stops heartbeating as soon as a generation
// ends, and only joins the next one once every partition of it was released. A coordinator
// removes a member that did not heartbeat for the session timeout, even while it waits for the
// members to rejoin, so a release that takes longer than the session timeout (the final snapshots
// of large filters going to an object store) would get the member removed: its rejoin then starts
// yet another rebalance, and the partitions it is still saving are handed on meanwhile. The
// consumer's Worker calls Heartbeats for the release of an ended generation, as the Java client's
// heartbeat thread does, so that the release is bounded by the rebalance timeout alone.
func Heartbeats(client *kafka.Client, member Member, interval time.Duration, log *Sampler) (stop func()) {
	if log == nil {
		log = NewSampler(nil, 0)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		var coordinator net.Addr
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if coordinator == nil {
				coordinator = findCoordinator(ctx, client, member.Group, log)
			}
			if coordinator == nil {
				continue
			}
			err := heartbeat(ctx, client, coordinator, member)
			switch {
			case err == nil, errors.Is(err, kafka.RebalanceInProgress):
			case Fenced(err):
				if member.OnFenced != nil {
					member.OnFenced(err)
				}
				log.Log(slog.LevelDebug, "release-heartbeat-end", "heartbeats during the release stop: the coordinator moved on",
					"generation", member.Generation, "error", err.Error())
				return
			default:
				if ctx.Err() == nil {
					log.Log(slog.LevelWarn, "release-heartbeat", "heartbeat during the partitions' release failed; retrying",
						"group", member.Group, "error", err.Error())
				}
				coordinator = nil // look it up again: it may have moved
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// findCoordinator returns the address of group's coordinator, or nil if it cannot be found now.
func findCoordinator(ctx context.Context, client *kafka.Client, group string, log *Sampler) net.Addr {
	res, err := client.FindCoordinator(ctx, &kafka.FindCoordinatorRequest{Key: group, KeyType: kafka.CoordinatorKeyTypeConsumer})
	if err == nil {
		err = res.Error
	}
	if err != nil || res.Coordinator == nil {
		if ctx.Err() == nil && err != nil {
			log.Log(slog.LevelWarn, "release-heartbeat", "group coordinator not found for the heartbeats during the partitions' release; retrying",
				"group", group, "error", err.Error())
		}
		return nil
	}
	c := res.Coordinator
	return kafka.TCP(net.JoinHostPort(c.Host, strconv.Itoa(c.Port)))
}
