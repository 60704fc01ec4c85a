package consumer

// Routing: the two stages of the routed scope (DEDUP_SCOPE=routed).
//
// Stage 1, the router, is a Worker with Config.Route set and a Passer as its Deduper: it reads an
// input topic and produces every record, unchanged plus the RouteHeader* headers, to the route
// topic (its Config.OutputTopic) at the partition of its identity (PartitionIdentity), and commits
// the input offsets once the route topic acknowledged the records, as any Worker does. Stage 2 is
// a Worker with Config.StripRouteHeaders set that reads the route topic with the partition scope
// and produces the survivors, without the RouteHeader* headers, to the output partition with the
// route partition's number (PartitionSame). A record that stage 1 writes twice (a crash between
// the route topic's acknowledgement and the input commit) reaches the same route partition twice
// with the same identity, so stage 2 drops the second copy like any duplicate.

import (
	"context"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/kdedup/kdedup/identity"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// RouteHeaderPrefix starts the name of every header the router adds; stage 2 removes every header
// whose name starts with it before it produces a record to the output topic.
const RouteHeaderPrefix = "kdedup-route-"

// The headers the router adds to each record it produces to the route topic. They are few and
// short because every routed record carries them through the brokers twice (the route topic's
// produce and fetch): one header per field made a routed record of BenchmarkRoutedScope about
// twice the input record's size, and its CPU per record about 9% higher.
const (
	// RouteHeaderFrom holds where the record was read: its input topic, partition and offset,
	// as "topic/partition/offset" (partition and offset in decimal; a topic name has no "/").
	RouteHeaderFrom = RouteHeaderPrefix + "from"
	// RouteHeaderID holds the record's identity as the router extracted it; a record without an
	// identity (passed under UnkeyedPass) has none. Stage 2 reads it (RouteKey) instead of
	// extracting the identity again.
	RouteHeaderID = RouteHeaderPrefix + "id"
)

// RouteFetchMaxWait caps the second stage's Config.FetchMaxWait. Its input, the route topic,
// arrives as a stream of small batches from every router, so its partitions are usually at their
// end, and a fetch waiting there for the broker's full wait held the whole pipeline back: on
// BenchmarkRoutedScope the default 500ms wait made the routed scope 0.2x as fast as 50ms did.
const RouteFetchMaxWait = 50 * time.Millisecond

// routeSeed seeds the hash that picks a record's route partition. It differs from the filter's
// seed (DEDUP_HASH_SEED, 0 by default) so that the identities of one route partition do not share
// the low bits of the hash the filter places them by. It must never change: a record routed with
// another seed would reach another partition than its earlier copies.
const routeSeed = 0x6b64656475702d72 // "kdedup-r"

// RoutePartition returns the route partition of identity id among n partitions: the xxhash64 of
// id, seeded with a constant of its own, modulo n. It is safe for concurrent use.
func RoutePartition(id []byte, n int) int {
	var d xxhash.Digest
	d.ResetWithSeed(routeSeed)
	d.Write(id)
	return int(d.Sum64() % uint64(n))
}

// partitioner picks the output partition of a record whose identity is id (nil: none), read
// from input partition input.
type partitioner interface {
	partition(m *kafkaio.Record, id []byte, input int) int
}

// identityPartitioner is PartitionIdentity's partitioner: RoutePartition of the identity, and
// input partition modulo n for a record without one.
type identityPartitioner struct{ n int }

func (p identityPartitioner) partition(_ *kafkaio.Record, id []byte, input int) int {
	if id == nil {
		return input % p.n
	}
	return RoutePartition(id, p.n)
}

// routeArena holds the routing headers of one batch: allocated per batch, so a record produced (or
// held at a refused record) never shares them with the next batch.
type routeArena struct {
	hdrs []kafkaio.Header
	buf  []byte
}

// reset prepares the arena for a batch of n records read from topic, whose own headers total
// hdrs.
func (a *routeArena) reset(n, hdrs int, topic string) {
	a.hdrs = make([]kafkaio.Header, 0, hdrs+2*n)
	a.buf = make([]byte, 0, (len(topic)+2+10+19)*n) // RouteHeaderFrom: topic, two slashes, an int32 and an int64
}

// routed returns m with the routing headers of topic and id appended to its own.
func (a *routeArena) routed(m *kafkaio.Record, topic string, partition int32, id []byte) kafkaio.Record {
	o := *m
	start := len(a.hdrs)
	a.hdrs = append(a.hdrs, m.Headers...)
	b := len(a.buf)
	a.buf = append(a.buf, topic...)
	a.buf = append(a.buf, '/')
	a.buf = strconv.AppendInt(a.buf, int64(partition), 10)
	a.buf = append(a.buf, '/')
	a.buf = strconv.AppendInt(a.buf, m.Offset, 10)
	a.hdrs = append(a.hdrs, kafkaio.Header{Key: RouteHeaderFrom, Value: a.buf[b:len(a.buf):len(a.buf)]})
	if id != nil {
		a.hdrs = append(a.hdrs, kafkaio.Header{Key: RouteHeaderID, Value: id})
	}
	o.Headers = a.hdrs[start:len(a.hdrs):len(a.hdrs)]
	return o
}

// stripRouteHeaders returns m without its RouteHeader* headers; m itself when it has none, so a
// record that never crossed a router costs nothing. The router appends its headers after the
// record's own, so they usually form the tail, and the result is then a shorter view of m's headers
// (its capacity cut, so an append to it does not overwrite them): no allocation per record. Headers
// in another order are copied.
func stripRouteHeaders(m kafkaio.Record) kafkaio.Record {
	n, tail := 0, len(m.Headers)
	for i, h := range m.Headers {
		if isRouteHeader(h.Key) {
			n++
			tail = min(tail, i)
		}
	}
	if n == 0 {
		return m
	}
	var hs []kafkaio.Header
	if tail == len(m.Headers)-n {
		hs = m.Headers[:tail:tail]
	} else {
		hs = make([]kafkaio.Header, 0, len(m.Headers)-n)
		for _, h := range m.Headers {
			if !isRouteHeader(h.Key) {
				hs = append(hs, h)
			}
		}
	}
	if len(hs) == 0 {
		hs = nil
	}
	m.Headers = hs
	return m
}

// routeID returns the value of the RouteHeaderID header among hs, or nil when there is none. It
// reads the slice directly: stage 2's KeyFunc (RouteKey) does the same through an iterator, whose
// closure costs an allocation per record.
func routeID(hs []kafkaio.Header) []byte {
	for i := range hs {
		if hs[i].Key == RouteHeaderID {
			return hs[i].Value
		}
	}
	return nil
}

// isRouteHeader reports whether a header named key is one of the router's.
func isRouteHeader(key string) bool {
	return len(key) >= len(RouteHeaderPrefix) && key[:len(RouteHeaderPrefix)] == RouteHeaderPrefix
}

// RouteKey returns stage 2's KeyFunc: the identity the router put in the RouteHeaderID header, or,
// for a record without one (the router passed it without an identity), what fallback extracts.
// fallback is the extractor of DEDUP_KEY, which the router used: the re-warm and rebuild read the
// output topic, whose records no longer carry the header, with it. The returned KeyFunc is safe
// for concurrent use if fallback is.
func RouteKey(fallback KeyFunc) KeyFunc {
	return func(ctx context.Context, key, value []byte, headers func(func(string, []byte) bool)) ([]byte, identity.Reason, error) {
		var id []byte
		for k, v := range headers {
			if k == RouteHeaderID {
				id = v
				break
			}
		}
		if id != nil {
			return id, identity.Found, nil
		}
		return fallback(ctx, key, value, headers)
	}
}

// Passer is the router's Deduper: it judges nothing (every record is new) and holds no state; the
// route topic's partitions are deduplicated by stage 2. Its zero value is ready and it is safe for
// concurrent use.
type Passer struct{}

// Generation does nothing.
func (Passer) Generation(int32, []int32, func(context.Context) error) {}

// Assign does nothing.
func (Passer) Assign(context.Context, int32) error { return nil }

// Seen returns false: every record goes on to the route topic.
func (Passer) Seen(int32, []byte, time.Time) bool { return false }

// Processing does nothing.
func (Passer) Processing(int32, int64) {}

// Acked does nothing.
func (Passer) Acked(int32, int64) {}

// Rewind does nothing: records the router reads again are routed again, and stage 2 drops the
// copies it already produced.
func (Passer) Rewind(int32, int64) {}

// Revoke does nothing.
func (Passer) Revoke(context.Context, int32) error { return nil }

// Discard does nothing.
func (Passer) Discard(context.Context, int32) error { return nil }
