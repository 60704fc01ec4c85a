package kafkaio

import (
	"context"
	"errors"
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
			res, err := client.Heartbeat(ctx, &kafka.HeartbeatRequest{
				Addr: coordinator, GroupID: member.Group, GenerationID: member.Generation, MemberID: member.ID,
			})
			if err == nil {
				err = res.Error
			}
			switch {
			case err == nil, errors.Is(err, kafka.RebalanceInProgress):
			case errors.Is(err, kafka.UnknownMemberId), errors.Is(err, kafka.IllegalGeneration):
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
