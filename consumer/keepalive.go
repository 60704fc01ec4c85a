package consumer

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// keepAlive heartbeats the group coordinator for gen's member while the partitions of the ended
// generation gen are released, until the returned stop is called (stop waits for it to finish).
//
// kafka-go stops heartbeating as soon as a generation ends, and only joins the next one once every
// partition of it was released. A coordinator removes a member that did not heartbeat for the
// session timeout, even while it waits for the members to rejoin, so without these heartbeats a
// release longer than KAFKA_SESSION_TIMEOUT (the final snapshots of large filters going to an
// object store) would get the member removed: its rejoin then starts yet another rebalance, and
// the partitions it is still saving are handed on meanwhile. The coordinator answers
// REBALANCE_IN_PROGRESS and counts the heartbeat, as it does for the Java client's heartbeat
// thread, so the release is bounded by the rebalance timeout alone (Config.releaseBudget).
// Heartbeats stop early once the coordinator no longer knows the member or the generation.
func (w *Worker) keepAlive(gen *kafka.Generation) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(w.cfg.HeartbeatInterval)
		defer t.Stop()
		var coordinator net.Addr
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if coordinator == nil {
				coordinator = w.findCoordinator(ctx)
			}
			if coordinator == nil {
				continue
			}
			res, err := w.client.Heartbeat(ctx, &kafka.HeartbeatRequest{
				Addr: coordinator, GroupID: w.cfg.GroupID, GenerationID: gen.ID, MemberID: gen.MemberID,
			})
			if err == nil {
				err = res.Error
			}
			switch {
			case err == nil, errors.Is(err, kafka.RebalanceInProgress):
			case errors.Is(err, kafka.UnknownMemberId), errors.Is(err, kafka.IllegalGeneration):
				w.log.Debug("heartbeats during the release stop: the coordinator moved on", "generation", gen.ID, "error", err.Error())
				return
			default:
				if ctx.Err() == nil {
					w.sample.Log(slog.LevelWarn, "release-heartbeat", "heartbeat during the partitions' release failed; retrying",
						"group", w.cfg.GroupID, "error", err.Error())
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

// findCoordinator returns the address of the group's coordinator, or nil if it cannot be found now.
func (w *Worker) findCoordinator(ctx context.Context) net.Addr {
	res, err := w.client.FindCoordinator(ctx, &kafka.FindCoordinatorRequest{Key: w.cfg.GroupID, KeyType: kafka.CoordinatorKeyTypeConsumer})
	if err == nil {
		err = res.Error
	}
	if err != nil || res.Coordinator == nil {
		if ctx.Err() == nil && err != nil {
			w.sample.Log(slog.LevelWarn, "release-heartbeat", "group coordinator not found for the heartbeats during the partitions' release; retrying",
				"group", w.cfg.GroupID, "error", err.Error())
		}
		return nil
	}
	c := res.Coordinator
	return kafka.TCP(net.JoinHostPort(c.Host, strconv.Itoa(c.Port)))
}
