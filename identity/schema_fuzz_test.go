package identity

import (
	"context"
	"encoding/json"
	"testing"
	"unsafe"

	"github.com/hamba/avro/v2"
	"github.com/kdedup/kdedup/identity/registrytest"
)

// within reports whether id lies inside data: an extraction never reads past the record.
func within(id, data []byte) bool {
	if len(id) == 0 {
		return true
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(id)))
	return p >= start && p+uintptr(len(id)) <= start+uintptr(len(data))
}

// fuzzPlans compiles the test schemas for a few paths, without a registry.
func fuzzPlans(t testing.TB) (avroPlans []avroPlan, protoPlans []protoPlan) {
	for _, path := range [][]string{{"meta", "id"}, {"meta", "n"}, {"note"}, {"kind"}, {"payload"}} {
		p, err := compileAvro(Schema{Text: avroV1}, path)
		if err != nil {
			t.Fatal(err)
		}
		avroPlans = append(avroPlans, p)
	}
	common := Reference{Name: "common.proto", Schema: Schema{Type: "PROTOBUF", Text: protoCommon}}
	for _, path := range [][]string{{"meta", "id"}, {"meta", "f"}, {"ref", "id"}, {"kind"}} {
		p, err := compileProto(Schema{Type: "PROTOBUF", Text: protoV1, References: []Reference{common}}, path)
		if err != nil {
			t.Fatal(err)
		}
		protoPlans = append(protoPlans, p)
	}
	return avroPlans, protoPlans
}

// FuzzAvroExtract feeds arbitrary bodies to compiled Avro plans: no panic, no identity outside
// the body (except an enum symbol, which the test schema's paths do not reach).
func FuzzAvroExtract(f *testing.F) {
	f.Add(encodeAvro(f, avroV1, eventV1("ev-1", 300)))
	f.Add([]byte{})
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01})
	f.Add([]byte{0x0a, 'o', 'r', 'd', 'e', 'r', 0x54, 0x01, 0x02, 'a', 0x00, 0x00, 0x02})
	plans, _ := fuzzPlans(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range plans {
			id, r, err := p.extract(body)
			if err != nil || (r == Found) != (len(id) > 0) || !within(id, body) {
				t.Fatalf("extract = %q, %v, %v", id, r, err)
			}
		}
	})
}

// FuzzProtobufExtract does the same for Protobuf bodies with their message indexes.
func FuzzProtobufExtract(f *testing.F) {
	f.Add(append([]byte{2, 2}, protoEvent(protoMeta("ev-1", 300, false), false)...))
	f.Add([]byte{0})
	f.Add([]byte{4, 2, 0, 0x12, 0x01, 'x'})
	f.Add([]byte{2, 2, 0x1a, 0x80, 0x80, 0x80, 0x80, 0x10})
	_, plans := fuzzPlans(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range plans {
			id, r, err := p.extract(body)
			if err != nil || (r == Found) != (len(id) > 0) || !within(id, body) {
				t.Fatalf("extract = %q, %v, %v", id, r, err)
			}
		}
	})
}

// FuzzParseProto feeds arbitrary .proto text to the parser: an error or a file, never a panic.
func FuzzParseProto(f *testing.F) {
	f.Add(protoV1)
	f.Add(protoV2)
	f.Add(`message A { map<string, B> m = 1; message B { oneof o { int32 x = 2; } } }`)
	f.Add(`/* unterminated`)
	f.Fuzz(func(t *testing.T, src string) {
		if file, err := parseProto(src); err == nil {
			_ = file.messages
			_, _ = compileProto(Schema{Type: "PROTOBUF", Text: src}, []string{"a", "b"})
		}
	})
}

// BenchmarkAvroExtract measures extraction of a field two levels deep from a record of about 300
// bytes against decoding the whole record with hamba/avro, the library baseline, and against
// json:meta.id on the same event as JSON. cpu-ns/op is the one to read on a busy machine:
//
//	go test -run '^$' -bench AvroExtract -benchtime 2000000x -cpu 1 -count 6 ./identity/
func BenchmarkAvroExtract(b *testing.B) {
	r := registrytest.New()
	defer r.Close()
	id := r.Register("events-value", "", avroV1)
	ev := eventV1("ord-2026-03-01-000123456", 300)
	ev.Payload = make([]byte, 150)
	ev.Tags = []string{"checkout", "mobile", "promo-spring", "eu-west"}
	ev.Attrs = map[string]string{"campaign": "spring-2026", "ab": "variant-b"}
	// meta follows the string, the long, the array and the map that the extractor skips.
	rec := wire(id, encodeAvro(b, avroV1, ev))
	b.Logf("record: %d bytes", len(rec))
	e := newExtractor(b, "avro:meta.id", newRegistry(b, r))
	ctx := context.Background()
	if got, _, err := e.Extract(ctx, nil, rec, nil); err != nil || string(got) != "ord-2026-03-01-000123456" {
		b.Fatalf("Extract = %q, %v", got, err)
	}
	schema := avro.MustParse(avroV1)
	// The same event as JSON, for json:meta.id: the identity it replaces.
	jsonRec, err := json.Marshal(map[string]any{"kind": ev.Kind, "seq": ev.Seq, "tags": ev.Tags, "attrs": ev.Attrs,
		"meta": map[string]any{"source": ev.Meta.Source, "id": ev.Meta.ID, "n": ev.Meta.N, "level": ev.Meta.Level},
		"note": ev.Note, "payload": ev.Payload})
	if err != nil {
		b.Fatal(err)
	}
	je := newExtractor(b, "json:meta.id", nil)
	b.Run("json_same_event", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(jsonRec)))
		parallelCPU(b, func(pb *testing.PB) {
			for pb.Next() {
				if _, r, _ := je.Extract(ctx, nil, jsonRec, nil); r != Found {
					b.Error("no identity")
					return
				}
			}
		})
	})
	b.Run("skip", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(rec)))
		parallelCPU(b, func(pb *testing.PB) {
			for pb.Next() {
				if _, r, err := e.Extract(ctx, nil, rec, nil); r != Found || err != nil {
					b.Error("no identity")
					return
				}
			}
		})
	})
	b.Run("hamba_decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(rec)))
		parallelCPU(b, func(pb *testing.PB) {
			for pb.Next() {
				var v avroEventV1
				if err := avro.Unmarshal(schema, rec[5:], &v); err != nil || v.Meta == nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// parallelCPU is b.RunParallel(body) that also reports cpu-ns/op, the process's CPU time per
// operation: on a loaded machine wall time per operation counts the time the benchmark waited for
// a core, CPU time does not.
func parallelCPU(b *testing.B, body func(*testing.PB)) {
	cpu0, ok := processCPU()
	b.RunParallel(body)
	if cpu1, _ := processCPU(); ok {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}
