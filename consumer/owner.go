package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// ErrNotOwner is wrapped by the error ownership.check returns once the worker lost its consumer
// group generation involuntarily: its partitions may belong to another member, so nothing of
// them may be saved any more.
var ErrNotOwner = errors.New("consumer: the consumer group generation was lost; its partitions may have moved")

// ownership tracks whether the worker still owns the partitions of one generation. The generation
// is lost, for good, once the coordinator answers a commit or a heartbeat with an error for which
// kafkaio.Fenced is true (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID: a session
// expired while the process was paused, for example). Ownership is a lease: every request of the
// generation the coordinator accepted (a commit, or a heartbeat of check's) renews the member's
// session, so its partitions cannot move before lease (the session timeout) has passed since the
// last one. check asks the coordinator when the last confirmation is older than fresh (the
// heartbeat interval), and fails, unless the answer is a confirmation, once the lease ran out: a
// paused process learns it was expelled before it saves or writes anything. Its methods are safe
// for concurrent use.
type ownership struct {
	client       *kafkaio.Client
	member       kafkaio.Member
	fresh, lease time.Duration

	lost atomic.Pointer[error]
	// rejoining: the member is rejoining its group with the generation's partitions still
	// running (the cooperative protocol). Until the next generation replaces this ownership,
	// check does not ask the coordinator (which answers for the old generation with errors once
	// it moved on) and fence ignores such answers; whether the partitions stayed is what the
	// next generation says (see Worker.generation).
	rejoining atomic.Bool
	// confirmed is when the coordinator last accepted a request of the generation (monotonic
	// nanoseconds since base): read without the lock on every batch.
	confirmed atomic.Int64
	base      time.Time

	mu     sync.Mutex // serialises questions: concurrent checks share one heartbeat
	asked  time.Time  // when check last asked the coordinator
	askErr error      // what it answered, if it could not confirm
}

// newOwnership returns the ownership of member's generation, confirmed now (the generation just
// started), asked again by check when older than fresh, and held for lease without an answer.
func newOwnership(client *kafkaio.Client, member kafkaio.Member, fresh, lease time.Duration) *ownership {
	fresh = max(fresh, 100*time.Millisecond)
	return &ownership{client: client, member: member, fresh: fresh, lease: max(lease, fresh), base: time.Now()}
}

// fence records err if it says the generation was lost (kafkaio.Fenced), and reports whether it
// did.
func (o *ownership) fence(err error) bool {
	if err == nil || !kafkaio.Fenced(err) || o.rejoining.Load() {
		return false
	}
	o.lost.CompareAndSwap(nil, &err)
	return true
}

// check returns nil while the worker owns the generation, and an error wrapping ErrNotOwner once
// it lost it. When the last confirmation is older than fresh it asks the coordinator
// (kafkaio.CheckMember, within half the lease), at most once per fresh; when no confirmation can
// be had it still returns nil within the lease, and after it the error of the last question, so
// that nothing is saved on a guess.
func (o *ownership) check(ctx context.Context) error {
	if err := o.lostErr(); err != nil {
		return err
	}
	if o.sinceConfirmed() < o.fresh || o.rejoining.Load() {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sinceConfirmed() < o.fresh {
		return o.lostErr()
	}
	if time.Since(o.asked) >= o.fresh || o.askErr == nil {
		if err := o.ask(ctx); err != nil {
			return err
		}
	}
	if err := o.lostErr(); err != nil || o.askErr == nil || o.sinceConfirmed() < o.lease {
		return err
	}
	return o.askErr
}

// rejoin says that the member rejoins its group keeping the generation's partitions (see
// rejoining); rejoinFailed ends that when the rejoin failed, and lose records that the next
// generation says the partitions were lost.
func (o *ownership) rejoin() { o.rejoining.Store(true) }

// rejoinFailed ends a rejoin that failed: check asks the coordinator again.
func (o *ownership) rejoinFailed() { o.rejoining.Store(false) }

// lose records that the generation's partitions were lost, for err: check fails from now on.
func (o *ownership) lose(err error) {
	o.lost.CompareAndSwap(nil, &err)
}

// checkLease is check without the questions that only refresh a confirmation: it asks the
// coordinator only once the lease ran out since the last confirmation, which a pause past the
// session timeout always leaves behind. The produce path calls it before every request, where a
// heartbeat per heartbeat interval of its own would add requests to a coordinator that is
// failing (and, under kfake's heartbeat faults, take answers meant for the worker's heartbeats,
// which confirm the ownership themselves).
func (o *ownership) checkLease(ctx context.Context) error {
	if err := o.lostErr(); err != nil {
		return err
	}
	if o.sinceConfirmed() < o.lease {
		return nil
	}
	return o.check(ctx)
}

// ask sends one heartbeat and records its answer; it returns an error only when ctx ended, which
// is no answer. The caller holds mu.
func (o *ownership) ask(ctx context.Context) error {
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, o.lease/2)
	defer cancel()
	err := kafkaio.CheckMember(actx, o.client, o.member)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("consumer: confirming the ownership of generation %d: %w", o.member.Generation, err)
	}
	o.asked, o.askErr = start, nil
	switch {
	case err == nil:
		o.confirm(start)
	case !o.fence(err):
		o.askErr = fmt.Errorf("consumer: confirming the ownership of generation %d: %w", o.member.Generation, err)
	}
	return nil
}

// confirm records that the coordinator accepted a request of the generation that started at
// start (an offset commit, or a heartbeat).
func (o *ownership) confirm(start time.Time) {
	at := int64(start.Sub(o.base))
	for {
		cur := o.confirmed.Load()
		if at <= cur || o.confirmed.CompareAndSwap(cur, at) {
			return
		}
	}
}

// sinceConfirmed returns the time since the last confirmation.
func (o *ownership) sinceConfirmed() time.Duration {
	return time.Since(o.base) - time.Duration(o.confirmed.Load())
}

func (o *ownership) lostErr() error {
	if p := o.lost.Load(); p != nil {
		return fmt.Errorf("%w (generation %d): %w", ErrNotOwner, o.member.Generation, *p)
	}
	return nil
}
