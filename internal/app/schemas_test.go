package app

// End-to-end runs of DEDUP_KEY=avro:meta.id and protobuf:meta.id: the real binary against the
// embedded broker and an in-process schema registry, with schema evolution and a registry outage
// during which a new schema version first appears.

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/kdedup/kdedup/identity/registrytest"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/tier"
	"google.golang.org/protobuf/encoding/protowire"
)

// The schemas of the run. Version 2 adds region (before meta) and meta.trace (first), so every
// field after them moves; the identity must not change.
const (
	e2eAvroV1 = `{"type":"record","name":"Event","namespace":"e2e","fields":[
		{"name":"kind","type":"string"},{"name":"seq","type":"long"},
		{"name":"meta","type":{"type":"record","name":"Meta","fields":[{"name":"source","type":"string"},{"name":"id","type":"string"}]}},
		{"name":"payload","type":"bytes"}]}`
	e2eAvroV2 = `{"type":"record","name":"Event","namespace":"e2e","fields":[
		{"name":"kind","type":"string"},{"name":"region","type":"string","default":"eu"},{"name":"seq","type":"long"},
		{"name":"meta","type":{"type":"record","name":"Meta","fields":[{"name":"trace","type":["null","string"],"default":null},
			{"name":"source","type":"string"},{"name":"id","type":"string"}]}},
		{"name":"payload","type":"bytes"}]}`
	e2eProtoV1 = `syntax = "proto3"; package e2e;
message Event { string kind = 1; int64 seq = 2; Meta meta = 3; bytes payload = 4;
  message Meta { string source = 1; string id = 2; } }`
	e2eProtoV2 = `syntax = "proto3"; package e2e;
message Event { string kind = 1; int64 seq = 2; Meta meta = 3; bytes payload = 4; string region = 5;
  message Meta { string source = 1; string id = 2; optional string trace = 3; } }`
)

// e2eEvent is one input record before encoding.
type e2eEvent struct {
	id, kind, source string
	seq              int64
	v2               bool // encoded under version 2
}

func zigzag(b []byte, v int64) []byte { return binary.AppendUvarint(b, uint64(v<<1^v>>63)) }

func avroString(b []byte, s string) []byte { return append(zigzag(b, int64(len(s))), s...) }

// encode returns the record value in Confluent's wire format under schema id.
func (e e2eEvent) encode(format string, id int) []byte {
	b := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(id))
	payload := make([]byte, 40)
	if format == "avro" {
		b = avroString(b, e.kind)
		if e.v2 {
			b = avroString(b, "us")
		}
		b = zigzag(b, e.seq)
		if e.v2 {
			b = avroString(zigzag(b, 1), "trace-"+e.kind) // union branch 1: string
		}
		b = avroString(avroString(b, e.source), e.id)
		return append(zigzag(b, int64(len(payload))), payload...)
	}
	b = append(b, 0) // message index [0]: Event
	var meta []byte
	if e.v2 { // a newer writer: other field order
		meta = protowire.AppendString(protowire.AppendTag(meta, 3, protowire.BytesType), "trace-"+e.kind)
		meta = protowire.AppendString(protowire.AppendTag(meta, 2, protowire.BytesType), e.id)
		meta = protowire.AppendString(protowire.AppendTag(meta, 1, protowire.BytesType), e.source)
		b = protowire.AppendString(protowire.AppendTag(b, 5, protowire.BytesType), "us")
	} else {
		meta = protowire.AppendString(protowire.AppendTag(meta, 1, protowire.BytesType), e.source)
		meta = protowire.AppendString(protowire.AppendTag(meta, 2, protowire.BytesType), e.id)
	}
	b = protowire.AppendString(protowire.AppendTag(b, 1, protowire.BytesType), e.kind)
	b = protowire.AppendVarint(protowire.AppendTag(b, 2, protowire.VarintType), uint64(e.seq))
	b = protowire.AppendBytes(protowire.AppendTag(b, 3, protowire.BytesType), meta)
	return protowire.AppendBytes(protowire.AppendTag(b, 4, protowire.BytesType), payload)
}

// e2eSize is the size of a run: per phase, originals, duplicates, decoys and records of an
// unknown schema id, spread over the partitions.
type e2eSize struct{ originals, duplicates, decoys, unknown int }

// e2ePartitions is the number of input and output partitions.
const e2ePartitions = 6

// e2eRecord is one produced record and whether it must reach the output.
type e2eRecord struct {
	msg  kafkaio.Record
	keep bool
}

// e2eStream builds one phase of records per partition: originals, duplicates of earlier
// originals of the partition (other fields changed, two thirds under version 2 when v2 is set),
// decoys (a new id, every other field of an original) and records of an unknown schema id.
func e2eStream(rng *rand.Rand, format string, phase int, size e2eSize, ids [2]int, v2 bool, seen [][]e2eEvent, seq *int) [][]e2eRecord {
	out := make([][]e2eRecord, e2ePartitions)
	const (
		original = iota
		duplicate
		decoy
		unknown
	)
	var kinds []int
	for k, n := range []int{size.originals, size.duplicates, size.decoys, size.unknown} {
		for range n {
			kinds = append(kinds, k)
		}
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	for i := 0; i < len(kinds); i++ {
		p := rng.IntN(e2ePartitions)
		if k := kinds[i]; (k == duplicate || k == decoy) && len(seen[p]) == 0 {
			kinds = append(kinds, k) // nothing to repeat in p yet: later, and an original now
			kinds[i] = original
		}
		*seq++
		var ev e2eEvent
		keep, schema := true, ids[0]
		switch kinds[i] {
		case duplicate:
			orig := seen[p][rng.IntN(len(seen[p]))]
			ev = e2eEvent{id: orig.id, kind: "retry", source: "app-2", seq: int64(*seq), v2: v2 && rng.IntN(3) < 2}
			keep = false // two thirds of phase 2's, a third of all, under version 2
		case decoy:
			ev = seen[p][rng.IntN(len(seen[p]))]
			ev.id = fmt.Sprintf("decoy-%d-%d", phase, *seq)
		case unknown:
			ev = e2eEvent{id: fmt.Sprintf("unknown-%d", *seq), kind: "x", source: "y"}
			schema = 99999
		default:
			ev = e2eEvent{id: fmt.Sprintf("ev-%d-%d", phase, *seq), kind: "order", source: "web", seq: int64(*seq), v2: v2 && rng.IntN(2) == 0}
			seen[p] = append(seen[p], ev)
		}
		if ev.v2 {
			schema = ids[1]
		}
		m := kafkaio.Record{Key: []byte(strconv.Itoa(*seq)), Value: ev.encode(format, schema),
			Headers: []kafkaio.Header{{Key: "seq", Value: []byte(strconv.Itoa(*seq))}}}
		out[p] = append(out[p], e2eRecord{msg: m, keep: keep})
	}
	return out
}

// TestSchemaIdentityEndToEnd runs DEDUP_KEY=avro:meta.id and protobuf:meta.id through the worker:
// two phases of originals, duplicates, decoys and records of an unknown schema id; between them
// the registry answers 503 and a new schema version appears, which the worker needs and cannot
// fetch until the registry is back. Every partition's output must be exactly its originals,
// decoys and unknown-schema records (those pass under the default DEDUP_UNKEYED_POLICY), in
// input order: no duplicate leaks, nothing is lost, and no record passed as unkeyed during the
// outage. Its size is the (60k originals) with KDEDUP_SCHEMA_E2E=full, a tenth of it
// otherwise; it is skipped with -short.
func TestSchemaIdentityEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run; skipped with -short")
	}
	size := e2eSize{originals: 3000, duplicates: 750, decoys: 150, unknown: 100} // per phase
	if os.Getenv("KDEDUP_SCHEMA_E2E") == "full" {
		size = e2eSize{originals: 30000, duplicates: 7500, decoys: 150, unknown: 100}
	}
	for _, format := range []string{"avro", "protobuf"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			runSchemaE2E(t, format, size)
		})
	}
}

func runSchemaE2E(t *testing.T, format string, size e2eSize) {
	tier.Integration(t)
	reg := registrytest.New()
	t.Cleanup(reg.Close)
	v1Text, v2Text, typ := e2eAvroV1, e2eAvroV2, "AVRO"
	if format == "protobuf" {
		v1Text, v2Text, typ = e2eProtoV1, e2eProtoV2, "PROTOBUF"
	}
	v1 := reg.Register("events-value", typ, v1Text)
	cl, err := embedkafka.Start(embedkafka.Options{Topics: map[string]int32{"in": e2ePartitions, "out": e2ePartitions}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	environ := restartEnviron(testbroker.FromFake(cl), "", "partition")
	environ["DEDUP_KEY"] = format + ":meta.id"
	environ["SCHEMA_REGISTRY_URL"] = reg.URL()
	environ["SCHEMA_REGISTRY_TIMEOUT"] = "500ms"
	environ["KAFKA_BATCH_SIZE"] = "500"
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(len(format)), 30))
	seen := make([][]e2eEvent, e2ePartitions)
	var seq int
	want := make([][]string, e2ePartitions) // seq headers of the records to keep, per partition
	produce := func(recs [][]e2eRecord) {
		for p, rs := range recs {
			msgs := make([]kafkaio.Record, len(rs))
			for i, r := range rs {
				msgs[i] = r.msg
				if r.keep {
					want[p] = append(want[p], string(r.msg.Headers[0].Value))
				}
			}
			if err := cl.Produce(ctx, "in", p, msgs...); err != nil {
				t.Fatal(err)
			}
		}
	}
	w := startWorker(t, environ)
	produce(e2eStream(rng, format, 1, size, [2]int{v1, v1}, false, seen, &seq))
	waitFor(t, w, 120*time.Second, "phase 1 caught up", func() bool { return caughtUp(testbroker.FromFake(cl)) })

	// The outage: a new schema version appears while the registry answers 503.
	reg.Fail(http.StatusServiceUnavailable)
	outage := time.Now()
	v2 := reg.Register("events-value", typ, v2Text)
	produce(e2eStream(rng, format, 2, size, [2]int{v1, v2}, true, seen, &seq))
	waitFor(t, w, 60*time.Second, "partitions held", func() bool {
		return w.metrics(t).value("kdedup_identity_held_partitions") > 0
	})
	if caughtUp(testbroker.FromFake(cl)) {
		t.Fatal("the worker caught up while the registry was down")
	}
	time.Sleep(time.Until(outage.Add(5 * time.Second))) // the outage lasts 5s, as specified
	reg.Fail(0)
	waitFor(t, w, 120*time.Second, "phase 2 caught up", func() bool { return caughtUp(testbroker.FromFake(cl)) })
	m := w.metrics(t)

	got, err := testbroker.FromFake(cl).ReadAll(ctx, "out")
	if err != nil {
		t.Fatal(err)
	}
	total, kept := 0, 0
	for p := range e2ePartitions {
		kept += len(want[p])
		var seqs []string
		for _, msg := range got[p] {
			seqs = append(seqs, string(msg.Headers[0].Value))
		}
		total += len(seqs)
		if d := firstDiff(seqs, want[p]); d != "" {
			t.Errorf("partition %d: output differs from the expected survivors in input order: %s", p, d)
		}
	}
	unknown := m.value("kdedup_records_unkeyed_by_reason_total", "reason", "unknown_schema")
	t.Logf("%s: %d records in, %d out (want %d), %v unknown-schema records passed, %v duplicates dropped",
		format, seq, total, kept, unknown, m.value("kdedup_duplicates_total"))
	if want := float64(2 * size.unknown); unknown != want {
		t.Errorf("%v records counted unknown_schema, want %v", unknown, want)
	}
	for _, r := range []string{"missing", "malformed", "not_wire_format", "not_in_schema"} {
		if n := m.value("kdedup_records_unkeyed_by_reason_total", "reason", r); n != 0 {
			t.Errorf("%v records unkeyed for %s, want 0", n, r)
		}
	}
	if n := reg.IDRequests(v2); n != 1 {
		t.Errorf("the new schema version was fetched %d times, want once", n)
	}
}

// firstDiff describes the first difference between got and want, or returns "".
func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("at %d: got seq %s, want seq %s (%d and %d records)", i, got[i], want[i], len(got), len(want))
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d records, want %d", len(got), len(want))
	}
	return ""
}
