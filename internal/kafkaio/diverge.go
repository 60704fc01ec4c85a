package kafkaio

import (
	"context"
	"errors"
	"log/slog"

	"github.com/segmentio/kafka-go"
)

// epochState is what a PartitionReader knows of its partition's leadership (see "Leader
// epochs"): the leader epoch and topic ID the metadata gave, and the leader epoch of the last
// batch fetched. Only the reader's fetch goroutine uses it.
type epochState struct {
	lead        partitionLeader // epoch -1 until known
	fetched     int32           // the leader epoch of the last batch fetched (first PartitionReaderConfig.OffsetEpoch's); -1 for none
	stale       bool            // the metadata is asked again before the next fetch
	lower       int             // metadata answers in a row with a lower epoch than lead's
	unsupported bool            // the brokers cannot tell epochs (before Kafka 2.1): fetch with -1
}

// newEpochState returns the state of a reader that knows nothing yet.
func newEpochState() epochState {
	return epochState{lead: partitionLeader{epoch: -1}, fetched: -1, stale: true}
}

// observe notes a fetch's outcome: an error that says the leadership or the topic changed makes
// the metadata be asked again.
func (e *epochState) observe(err error) {
	if err == nil {
		return
	}
	for _, code := range []kafka.Error{kafka.FencedLeaderEpoch, kafka.UnknownLeaderEpoch, kafka.NotLeaderForPartition,
		kafka.UnknownTopicOrPartition, kafka.LeaderNotAvailable, kafka.OffsetOutOfRange, kafka.UnknownTopicID, kafka.InconsistentTopicID} {
		if errors.Is(err, code) {
			e.stale = true
			return
		}
	}
}

// walked notes the leader epoch of the last complete batch of a fetched record set.
func (e *epochState) walked(set []byte) {
	if epoch := lastEpoch(set); epoch >= 0 {
		e.fetched = epoch
	}
}

// validate learns the partition's leader epoch before a fetch when it is not known yet or went
// stale, and checks the log against what was read: a topic re-created under the reader
// (recreated) or a new leader whose log diverged below the reader's position (diverged) moves
// *offset. On failure nothing is learned, and the next fetch asks again.
func (r *PartitionReader) validate(ctx context.Context, offset *int64) error {
	e := &r.epochs
	if !e.stale || e.unsupported {
		return nil
	}
	lead, err := r.leaderOf(ctx)
	if errors.Is(err, errUnsupportedVersion) {
		e.unsupported, e.lead.epoch = true, -1
		return nil
	}
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait+FetchSlack)
	defer cancel()
	prev := e.lead
	ids := prev.topicID != [16]byte{} && lead.topicID != [16]byte{} // both known (Metadata v10 on)
	switch {
	case prev.epoch < 0 && e.fetched >= 0 && e.fetched != lead.epoch:
		// The first look of a reader that starts where a group committed, under another
		// leader epoch: the log may have been truncated below the offset since.
		err = r.diverged(lctx, offset, lead.epoch)
	case prev.epoch < 0: // the first look: nothing to compare
	case ids && prev.topicID != lead.topicID:
		err = r.recreated(lctx, offset, prev, lead)
	case lead.epoch < prev.epoch && (ids || e.lower < staleAnswers-1):
		e.lower++
		err = errStaleMetadata
	case lead.epoch < prev.epoch:
		err = r.recreated(lctx, offset, prev, lead)
	case lead.epoch > prev.epoch && e.fetched >= 0:
		err = r.diverged(lctx, offset, lead.epoch)
	}
	if err == nil {
		e.lead, e.stale, e.lower = lead, false, 0
	}
	return err
}

// leaderOf looks the partition's leadership up. The readers of a pool share their look-ups
// (FetchPool.leaderOf), which take one of its lookup slots, as the offset lookups do: every
// reader looks once at the start, and 96 at once would each open a connection.
func (r *PartitionReader) leaderOf(ctx context.Context) (partitionLeader, error) {
	if r.cfg.Pool != nil {
		return r.cfg.Pool.leaderOf(ctx, r.cfg.Topic, int32(r.cfg.Partition))
	}
	mctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait+FetchSlack)
	defer cancel()
	return leaderOf(mctx, r.client, r.clientID, r.cfg.Topic, int32(r.cfg.Partition))
}

// staleAnswers is how many metadata answers in a row must give a partition a lower leader epoch
// than the reader knows before a topic without topic IDs (before Kafka 2.8) counts as re-created:
// a broker whose metadata lags behind can give one such answer.
const staleAnswers = 3

// errStaleMetadata is the error of a fetch skipped because the metadata gave the partition a lower
// leader epoch than the reader knows: a broker's metadata lags, or, when it persists without topic
// IDs, the topic was re-created. The reader asks again.
var errStaleMetadata = errors.New("kafkaio: the metadata gives an older leader epoch than the reader knows (a broker's metadata lags behind)")

// recreated handles a topic that was deleted and created again under the reader (its ID changed,
// or, without topic IDs, its leader epoch stayed lower for staleAnswers answers): it is logged and
// counted, and reading starts over in the new log, at its start or (ResetToLatest) its end, past
// the records it holds (counted as skipped).
func (r *PartitionReader) recreated(ctx context.Context, offset *int64, prev, lead partitionLeader) error {
	o, err := r.offsets(ctx)
	if err != nil {
		return err
	}
	to, where := r.policyOffset(o)
	r.cfg.Log.Log(slog.LevelError, "topic-recreated", "the input topic was deleted and created again under the reader; reading starts over in the new log at the "+where+
		" offset, and records of the old topic after the offset were not read", "topic", r.cfg.Topic, "partition", r.cfg.Partition,
		"offset", *offset, "to", to, "leader_epoch", lead.epoch, "previous_leader_epoch", prev.epoch, "topic_id_changed", prev.topicID != lead.topicID)
	r.reread(RereadRecreated, *offset-to)
	*offset = to
	r.epochs.fetched = -1
	return nil
}

// diverged asks the leader of epoch current where the log of the epoch of the last batch fetched
// ends. An end below the reader's position means the new leader's log was truncated under it (an
// unclean leader election): the records read from there on are no longer in the log, and reading
// goes back to the end, as the Java consumer does, to read the records that replaced them. When
// the leader knows no epoch as old (it answers no end), the offset is reset as ResetToLatest
// says (epochUnknown). Either is logged and counted.
func (r *PartitionReader) diverged(ctx context.Context, offset *int64, current int32) error {
	var end int64
	err := r.lookup(ctx, func() (err error) {
		end, err = epochEnd(ctx, r.client, r.clientID, r.cfg.Topic, int32(r.cfg.Partition), current, r.epochs.fetched)
		return err
	})
	if err != nil {
		return err
	}
	if end >= *offset {
		return nil
	}
	if end < 0 {
		return r.epochUnknown(ctx, offset, current)
	}
	r.cfg.Log.Log(slog.LevelError, "log-truncated", "the input partition's log was truncated below the reader's position by a leader change "+
		"(an unclean leader election); reading goes back to where the new leader's log diverged, and records already read there are replaced",
		"topic", r.cfg.Topic, "partition", r.cfg.Partition, "offset", *offset, "to", end, "leader_epoch", current, "fetched_epoch", r.epochs.fetched)
	r.reread(RereadTruncated, *offset-end)
	*offset = end
	return nil
}

// epochUnknown handles a leader of epoch current that knows no epoch as old as the one the
// records before *offset were read under: its log is not the one they were read from (truncated
// below them, or the topic re-created), so reading goes on where ResetToLatest says, logged and
// counted.
func (r *PartitionReader) epochUnknown(ctx context.Context, offset *int64, current int32) error {
	o, err := r.offsets(ctx)
	if err != nil {
		return err
	}
	to, where := r.policyOffset(o)
	r.cfg.Log.Log(slog.LevelError, "log-truncated", "the input partition's leader knows no leader epoch as old as the one the records before the reader's position "+
		"were read under (its log was truncated below them, or the topic re-created); reading goes on at the "+where+" offset",
		"topic", r.cfg.Topic, "partition", r.cfg.Partition, "offset", *offset, "to", to, "leader_epoch", current, "fetched_epoch", r.epochs.fetched)
	r.reread(RereadTruncated, *offset-to)
	*offset = to
	return nil
}

// reread tells OnReread that reading went back n offsets, for reason.
func (r *PartitionReader) reread(reason string, n int64) {
	if r.cfg.OnReread != nil && n > 0 {
		r.cfg.OnReread(reason, n)
	}
}
