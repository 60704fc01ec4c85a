// Package kfaketest holds the tests' hooks into the embedded broker (internal/embedkafka): what
// only a test does to a running kfake cluster, such as enforcing retention now, electing a
// partition's leader again, or delaying or substituting the answers to one kind of request. It
// reaches the cluster through embedkafka.Cluster.Kfake, so that embedkafka, which the binary links
// for its demo, exports only what the binary uses. Only tests import this package.
package kfaketest

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ApplyRetention makes the running cluster enforce every topic's retention.ms and retention.bytes
// now: batches past them are deleted and the partitions' earliest offsets move forward. It does
// nothing when the cluster is stopped.
func ApplyRetention(cl *embedkafka.Cluster) {
	if c := cl.Kfake(); c != nil {
		c.ApplyRetention()
	}
}

// NewLeaderEpoch makes the running cluster elect the leader of topic/partition again, under a
// new leader epoch, as a leader election does (kfake's MoveTopicPartition to the same broker). It
// fails when the cluster is stopped or has no such partition.
func NewLeaderEpoch(cl *embedkafka.Cluster, topic string, partition int32) error {
	c := cl.Kfake()
	if c == nil {
		return errors.New("kfaketest: the cluster is stopped")
	}
	return c.MoveTopicPartition(topic, partition, c.LeaderFor(topic, partition))
}

// EpochEnd returns an answer (for Answer, or a kfake control function) to an OffsetForLeaderEpoch
// request that says the log of every partition's asked epoch ends at end, as a new leader
// whose log was truncated there by an unclean election answers (kfake never truncates a log).
func EpochEnd(end int64) func(kmsg.Request) kmsg.Response {
	return func(kr kmsg.Request) kmsg.Response {
		req := kr.(*kmsg.OffsetForLeaderEpochRequest)
		res := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		for _, rt := range req.Topics {
			t := kmsg.NewOffsetForLeaderEpochResponseTopic()
			t.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				p := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				p.Partition, p.LeaderEpoch, p.EndOffset = rp.Partition, rp.LeaderEpoch, end
				t.Partitions = append(t.Partitions, p)
			}
			res.Topics = append(res.Topics, t)
		}
		return res
	}
}

// Delay makes the running cluster hold every request with the given key (kmsg.Fetch, …) for d
// before it handles it, as a slow or distant broker would, until the returned function is
// called; requests on other connections go on meanwhile, the next request on the same connection
// waits its turn, as the protocol requires. It returns nil when the cluster is stopped. A delay
// does not survive Stop.
func Delay(cl *embedkafka.Cluster, key kmsg.Key, d time.Duration) (stop func()) {
	c := cl.Kfake()
	if c == nil {
		return nil
	}
	var stopped atomic.Bool
	c.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
		if stopped.Load() {
			c.DropControl()
			return nil, nil, false
		}
		c.SleepControl(func() { time.Sleep(d) })
		return nil, nil, false // not handled: the broker answers it as usual
	})
	return func() { stopped.Store(true) }
}

// Answer makes the running cluster answer up to n requests with key by what answer returns for
// them, instead of handling them (kfake.Cluster.ControlKey); a request for which answer returns
// nil is handled as usual and not counted. answer runs on the cluster's goroutine and must not
// block. It returns a function that tells how many requests were answered, or nil when the
// cluster is stopped. Answers do not survive Stop.
func Answer(cl *embedkafka.Cluster, key kmsg.Key, n int, answer func(kmsg.Request) kmsg.Response) (answered func() int) {
	c := cl.Kfake()
	if c == nil {
		return nil
	}
	var count atomic.Int64
	c.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
		res := answer(req)
		if res == nil {
			return nil, nil, false
		}
		if count.Add(1) < int64(n) {
			c.KeepControl() // sticks once set: the last answer drops the control
		} else {
			c.DropControl()
		}
		return res, nil, true
	})
	return func() int { return int(count.Load()) }
}
