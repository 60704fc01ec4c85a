package consumer_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/identity"
	"github.com/kdedup/kdedup/identity/registrytest"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

// benchAvroSchema is the Avro schema of BenchmarkIdentityEndToEnd's events; its JSON events carry
// the same fields.
const benchAvroSchema = `{"type":"record","name":"Event","fields":[
	{"name":"kind","type":"string"},{"name":"seq","type":"long"},{"name":"source","type":"string"},
	{"name":"meta","type":{"type":"record","name":"Meta","fields":[{"name":"trace","type":"string"},{"name":"id","type":"string"}]}},
	{"name":"payload","type":"string"}]}`

// benchEvent returns the fields of the event of partition p with id.
func benchEvent(p, id int) (kind, source, trace, eid, payload string, seq int64) {
	return "order", "checkout-web", "00-4bf92f3577b34da6-00f067aa0ba902b7", fmt.Sprintf("ev-%d-%09d", p, id),
		"a payload of about sixty bytes that the identity skips over..", int64(id)
}

// BenchmarkIdentityEndToEnd measures the CPU per record of the worker (BenchmarkEndToEnd's
// pipeline with a mutex+map Deduper) when the identity is meta.id of the same events encoded as
// JSON (json:meta.id) and as Avro in Confluent's wire format (avro:meta.id, schema from an
// in-process registry). Compare cpu-ns/event of the two in the same run:
//
//	go test -run '^$' -bench IdentityEndToEnd -benchtime 200000x -count 5 ./consumer/
func BenchmarkIdentityEndToEnd(b *testing.B) {
	reg := registrytest.New()
	defer reg.Close()
	schemaID := reg.Register("events-value", "", benchAvroSchema)
	client, err := identity.NewRegistry(identity.RegistryConfig{URL: reg.URL()})
	if err != nil {
		b.Fatal(err)
	}
	str := func(buf []byte, s string) []byte {
		return append(binary.AppendUvarint(buf, uint64(len(s))<<1), s...)
	}
	for _, c := range []struct {
		spec   string
		encode func(p, id int) []byte
	}{
		{"json:meta.id", func(p, id int) []byte {
			kind, source, trace, eid, payload, seq := benchEvent(p, id)
			return fmt.Appendf(nil, `{"kind":%q,"seq":%d,"source":%q,"meta":{"trace":%q,"id":%q},"payload":%q}`, kind, seq, source, trace, eid, payload)
		}},
		{"avro:meta.id", func(p, id int) []byte {
			kind, source, trace, eid, payload, seq := benchEvent(p, id)
			v := binary.BigEndian.AppendUint32([]byte{0}, uint32(schemaID))
			v = str(v, kind)
			v = binary.AppendUvarint(v, uint64(seq<<1^seq>>63))
			return str(str(str(str(v, source), trace), eid), payload)
		}},
	} {
		b.Run(c.spec, func(b *testing.B) {
			sp, err := identity.Parse(c.spec)
			if err != nil {
				b.Fatal(err)
			}
			e, err := identity.New(sp, identity.Options{Registry: client})
			if err != nil {
				b.Fatal(err)
			}
			benchPipelineOf(b, testbroker.Fake, 4, identityRunner(e.Extract), func(p, id int) kafkaio.Record {
				return kafkaio.Record{Key: []byte(fmt.Sprintf("key-%d", id%100)), Value: c.encode(p, id), Time: time.Now()}
			})
		})
	}
}

// identityRunner is worker-drop with the KeyFunc kf.
func identityRunner(kf consumer.KeyFunc) pipeline {
	return func(ctx context.Context, cl testbroker.Broker) error {
		cfg := benchConfig(cl.Addrs(), "in", "out", "g", benchBatch)
		w, err := consumer.New(cfg, newMapDeduper(false, nil), kf, nil, testLog)
		if err != nil {
			return err
		}
		return w.Run(ctx)
	}
}
