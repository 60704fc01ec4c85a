package identity

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/kdedup/kdedup/identity/registrytest"
	"google.golang.org/protobuf/encoding/protowire"
)

// The Avro schemas of the tests: version 2 adds fields (one before meta, one inside it), moves an
// optional field and promotes meta.n from int to long.
const (
	avroV1 = `{"type":"record","name":"Event","namespace":"com.example","fields":[
		{"name":"kind","type":"string"},
		{"name":"seq","type":"long"},
		{"name":"tags","type":{"type":"array","items":"string"}},
		{"name":"attrs","type":{"type":"map","values":"string"}},
		{"name":"meta","type":["null",{"type":"record","name":"Meta","fields":[
			{"name":"source","type":"string"},
			{"name":"id","type":"string"},
			{"name":"n","type":"int"},
			{"name":"level","type":{"type":"enum","name":"Level","symbols":["LOW","HIGH"]}}]}]},
		{"name":"note","type":["null","string"],"default":null},
		{"name":"payload","type":"bytes"}]}`
	avroV2 = `{"type":"record","name":"Event","namespace":"com.example","fields":[
		{"name":"note","type":["null","string"],"default":null},
		{"name":"kind","type":"string"},
		{"name":"region","type":"string","default":"eu"},
		{"name":"seq","type":"long"},
		{"name":"tags","type":{"type":"array","items":"string"}},
		{"name":"attrs","type":{"type":"map","values":"string"}},
		{"name":"meta","type":["null",{"type":"record","name":"Meta","fields":[
			{"name":"trace","type":["null","string"],"default":null},
			{"name":"source","type":"string"},
			{"name":"id","type":"string"},
			{"name":"n","type":"long"},
			{"name":"level","type":{"type":"enum","name":"Level","symbols":["HIGH","LOW"]}}]}]},
		{"name":"payload","type":"bytes"}]}`
)

type avroMetaV1 struct {
	Source string `avro:"source"`
	ID     string `avro:"id"`
	N      int32  `avro:"n"`
	Level  string `avro:"level"`
}

type avroEventV1 struct {
	Kind    string            `avro:"kind"`
	Seq     int64             `avro:"seq"`
	Tags    []string          `avro:"tags"`
	Attrs   map[string]string `avro:"attrs"`
	Meta    *avroMetaV1       `avro:"meta"`
	Note    *string           `avro:"note"`
	Payload []byte            `avro:"payload"`
}

type avroMetaV2 struct {
	Trace  *string `avro:"trace"`
	Source string  `avro:"source"`
	ID     string  `avro:"id"`
	N      int64   `avro:"n"`
	Level  string  `avro:"level"`
}

type avroEventV2 struct {
	Note    *string           `avro:"note"`
	Kind    string            `avro:"kind"`
	Region  string            `avro:"region"`
	Seq     int64             `avro:"seq"`
	Tags    []string          `avro:"tags"`
	Attrs   map[string]string `avro:"attrs"`
	Meta    *avroMetaV2       `avro:"meta"`
	Payload []byte            `avro:"payload"`
}

// wire prefixes body with Confluent's wire format header for schema id.
func wire(id int, body ...[]byte) []byte {
	b := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(id))
	for _, p := range body {
		b = append(b, p...)
	}
	return b
}

func encodeAvro(t testing.TB, schema string, v any) []byte {
	t.Helper()
	b, err := avro.Marshal(avro.MustParse(schema), v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func eventV1(id string, n int32) avroEventV1 {
	note := "a note"
	return avroEventV1{Kind: "order", Seq: 42, Tags: []string{"a", "bb"}, Attrs: map[string]string{"k": "v"},
		Meta: &avroMetaV1{Source: "web", ID: id, N: n, Level: "HIGH"}, Note: &note, Payload: bytes.Repeat([]byte{7}, 20)}
}

func eventV2(id string, n int64) avroEventV2 {
	trace := "t-1"
	return avroEventV2{Kind: "order", Region: "us", Seq: 43, Tags: []string{"c"}, Attrs: map[string]string{},
		Meta: &avroMetaV2{Trace: &trace, Source: "app", ID: id, N: n, Level: "HIGH"}, Payload: []byte("p")}
}

// extractCase is one record of the golden tests: the spec, the record value (the key for the
// -key forms) and the identity or reason it must give.
type extractCase struct {
	spec, name string
	value      []byte
	want       string
	reason     Reason
}

// runCases runs the cases against reg.
func runCases(t *testing.T, reg Registry, tests []extractCase) {
	for _, tt := range tests {
		t.Run(tt.spec+"/"+tt.name, func(t *testing.T) {
			e := newExtractor(t, tt.spec, reg)
			key, value := []byte("k"), tt.value
			if e.Spec().FromKey {
				key, value = value, []byte("v")
			}
			id, reason, err := e.Extract(context.Background(), key, value, nil)
			if err != nil || reason != tt.reason || string(id) != tt.want {
				t.Fatalf("Extract = %q, %v, %v; want %q, %v", id, reason, err, tt.want, tt.reason)
			}
		})
	}
}

func newExtractor(t testing.TB, spec string, reg Registry) *Extractor {
	t.Helper()
	sp, err := Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(sp, Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func newRegistry(t testing.TB, r *registrytest.Registry) *HTTPRegistry {
	t.Helper()
	reg, err := NewRegistry(RegistryConfig{URL: r.URL(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestAvroExtract reads golden Avro records of two schema versions: the same id is the same
// identity under both, and every permanent reason comes out as documented.
func TestAvroExtract(t *testing.T) {
	r := registrytest.New()
	defer r.Close()
	v1 := r.Register("events-value", "", avroV1)
	v2 := r.Register("events-value", "AVRO", avroV2)
	proto := r.Register("other-value", "PROTOBUF", `syntax = "proto3"; message M { string id = 1; }`)
	reg := newRegistry(t, r)
	recV1 := wire(v1, encodeAvro(t, avroV1, eventV1("ev-1", 300)))
	recV2 := wire(v2, encodeAvro(t, avroV2, eventV2("ev-1", 300)))
	nullMeta := eventV1("x", 1)
	nullMeta.Meta = nil
	recNull := wire(v1, encodeAvro(t, avroV1, nullMeta))
	emptyID := wire(v1, encodeAvro(t, avroV1, eventV1("", 1)))
	tests := []extractCase{
		{"avro:meta.id", "v1", recV1, "ev-1", Found},
		{"avro:meta.id", "v2, fields added and moved", recV2, "ev-1", Found},
		{"avro:meta.n", "int v1", recV1, "\xd8\x04", Found},
		{"avro:meta.n", "promoted to long", recV2, "\xd8\x04", Found},
		{"avro:meta.level", "enum symbol, reordered", recV2, "HIGH", Found},
		{"avro:meta.level", "enum symbol", recV1, "HIGH", Found},
		{"avro:kind", "top level", recV1, "order", Found},
		{"avro:note", "nullable string", recV1, "a note", Found},
		{"avro:note", "null", recV2, "", Missing},
		{"avro:meta.id", "null meta", recNull, "", Missing},
		{"avro:meta.id", "empty string", emptyID, "", Missing},
		{"avro:meta.id", "truncated", recV1[:30], "", Malformed},
		{"avro:meta.id", "no magic byte", append([]byte{1}, recV1[1:]...), "", NotWireFormat},
		{"avro:meta.id", "short", []byte{0, 0, 0}, "", NotWireFormat},
		{"avro:meta.id", "unknown id", wire(999, recV1[5:]), "", UnknownSchema},
		{"avro:meta.id", "protobuf schema", wire(proto, recV1[5:]), "", UnknownSchema},
		{"avro:meta.nope", "no such field", recV1, "", NotInSchema},
		{"avro:tags", "array", recV1, "", NotInSchema},
		{"avro:meta", "record", recV1, "", NotInSchema},
		{"avro:kind.x", "through a string", recV1, "", NotInSchema},
		{"avro-key:meta.id", "key", recV1, "ev-1", Found},
	}
	runCases(t, reg, tests)
	if n := r.IDRequests(v1); n != 1 {
		t.Errorf("schema %d fetched %d times, want once", v1, n)
	}
}

// The Protobuf schemas of the tests: common.proto is a reference; version 2 adds fields and
// renames none.
const (
	protoCommon = `syntax = "proto3";
package common;
message Ref { string id = 1; }`
	protoV1 = `syntax = "proto3";
package ex;
import "common.proto";
option go_package = "example.com/ex";
// A comment { with braces }.
message Other { string x = 1; }
message Event {
  string kind = 1;
  int64 seq = 2;
  Meta meta = 3;
  repeated string tags = 4;
  map<string, string> attrs = 5 [deprecated = true];
  common.Ref ref = 6;
  oneof choice { string a = 7; sint64 b = 8; }
  reserved 9, 10 to 12;
  message Meta {
    string source = 1;
    string id = 2;
    int32 n = 3;
    Level level = 4;
    fixed64 f = 5;
  }
  enum Level { LOW = 0; HIGH = 1; }
}`
	protoV2 = `syntax = "proto3";
package ex;
import "common.proto";
message Other { string x = 1; }
message Event {
  string kind = 1;
  string region = 13;
  int64 seq = 2;
  Meta meta = 3;
  repeated string tags = 4;
  map<string, string> attrs = 5;
  common.Ref ref = 6;
  oneof choice { string a = 7; sint64 b = 8; }
  message Meta {
    optional string trace = 6;
    string source = 1;
    string id = 2;
    int64 n = 3;
    Level level = 4;
    fixed64 f = 5;
  }
  enum Level { LOW = 0; HIGH = 1; }
}`
)

// protoMeta encodes an Event.Meta, fields in the order given by v2 when newer.
func protoMeta(id string, n int64, newer bool) []byte {
	var b []byte
	if newer {
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendString(b, "t-1")
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(n))
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, id)
		return b
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, "web")
	if id != "" {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, id)
	}
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(n))
	b = protowire.AppendTag(b, 4, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	b = protowire.AppendTag(b, 5, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, 0x0102030405060708)
}

// protoEvent encodes an Event whose meta is meta (nil: none).
func protoEvent(meta []byte, newer bool) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, "order")
	if newer {
		b = protowire.AppendTag(b, 13, protowire.BytesType)
		b = protowire.AppendString(b, "us")
	}
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, 42)
	for _, tag := range []string{"a", "b"} {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendString(b, tag)
	}
	ref := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "r-9")
	b = protowire.AppendTag(b, 6, protowire.BytesType)
	b = protowire.AppendBytes(b, ref)
	if meta != nil {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, meta)
	}
	return b
}

// TestProtobufExtract reads golden Protobuf records of two schema versions, with the message
// chosen by its index list, a reference, and every permanent reason.
func TestProtobufExtract(t *testing.T) {
	r := registrytest.New()
	defer r.Close()
	r.Register("common.proto", "PROTOBUF", protoCommon)
	ref := registrytest.Reference{Name: "common.proto", Subject: "common.proto", Version: 1}
	v1 := r.Register("events-value", "PROTOBUF", protoV1, ref)
	v2 := r.Register("events-value", "PROTOBUF", protoV2, ref)
	reg := newRegistry(t, r)
	idx1 := []byte{2, 2}         // [1]: Event, the second message
	idxNested := []byte{4, 2, 0} // [1, 0]: Event.Meta
	recV1 := wire(v1, idx1, protoEvent(protoMeta("ev-1", 300, false), false))
	recV2 := wire(v2, idx1, protoEvent(protoMeta("ev-1", 300, true), true))
	twice := wire(v1, idx1, protoEvent(protoMeta("first", 1, false), false), protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), protoMeta("last", 2, false)))
	tests := []extractCase{
		{"protobuf:meta.id", "v1", recV1, "ev-1", Found},
		{"protobuf:meta.id", "v2, fields added and reordered", recV2, "ev-1", Found},
		{"protobuf:meta.n", "int32 then int64", recV1, "\xac\x02", Found},
		{"protobuf:meta.n", "int64", recV2, "\xac\x02", Found},
		{"protobuf:meta.level", "enum", recV1, "\x01", Found},
		{"protobuf:meta.f", "fixed64", recV1, "\x08\x07\x06\x05\x04\x03\x02\x01", Found},
		{"protobuf:ref.id", "imported type", recV1, "r-9", Found},
		{"protobuf:kind", "top level", recV1, "order", Found},
		{"protobuf:meta.id", "merged occurrences: the last wins", twice, "last", Found},
		{"protobuf:meta.id", "no meta", wire(v1, idx1, protoEvent(nil, false)), "", Missing},
		{"protobuf:meta.id", "no id", wire(v1, idx1, protoEvent(protoMeta("", 1, false), false)), "", Missing},
		{"protobuf:id", "nested message chosen by index", wire(v1, idxNested, protoMeta("m", 1, false)), "m", Found},
		{"protobuf:x", "index 0 as a single byte", wire(v1, []byte{0}, protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "o")), "o", Found},
		{"protobuf:meta.id", "message without the path", wire(v1, []byte{0}, nil), "", NotInSchema},
		{"protobuf:meta.id", "index of no message", wire(v1, []byte{2, 10}, nil), "", NotInSchema},
		{"protobuf:meta.id", "truncated", recV1[:len(recV1)-3], "", Malformed},
		{"protobuf:meta.id", "wrong wire type", wire(v1, idx1, protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 1)), "", Malformed},
		{"protobuf:meta.id", "no magic byte", append([]byte{1}, recV1[1:]...), "", NotWireFormat},
		{"protobuf:meta.id", "unknown id", wire(999, idx1), "", UnknownSchema},
		{"protobuf:tags", "repeated", recV1, "", NotInSchema},
		{"protobuf:meta", "message", recV1, "", NotInSchema},
		{"protobuf:meta.nope", "no such field", recV1, "", NotInSchema},
		{"protobuf-key:meta.id", "key", recV1, "ev-1", Found},
	}
	runCases(t, reg, tests)
}

// TestRegistryFaults proves the fail-safe contract over HTTP: a registry that answers 503 or
// times out gives a retry error (never a reason), nothing of it is cached, and the same record
// extracts once the registry is back; concurrent extractions of a new id fetch it once.
func TestRegistryFaults(t *testing.T) {
	r := registrytest.New()
	defer r.Close()
	id := r.Register("events-value", "", avroV1)
	reg, err := NewRegistry(RegistryConfig{URL: r.URL(), Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e := newExtractor(t, "avro:meta.id", reg)
	rec := wire(id, encodeAvro(t, avroV1, eventV1("ev-7", 1)))
	r.Fail(http.StatusServiceUnavailable)
	if _, reason, err := e.Extract(context.Background(), nil, rec, nil); !errors.Is(err, ErrRetry) || reason != Found {
		t.Fatalf("503: reason %v, err %v; want a retry error", reason, err)
	}
	before := r.Requests()
	if _, _, err := e.Extract(context.Background(), nil, rec, nil); !errors.Is(err, ErrRetry) || r.Requests() != before {
		t.Fatalf("a failure is not answered from the cache for a while: err %v, %d requests", err, r.Requests()-before)
	}
	e.schemas.retryAfter = 0
	r.Fail(0)
	r.Delay(time.Second)
	if _, _, err := e.Extract(context.Background(), nil, rec, nil); !errors.Is(err, ErrRetry) {
		t.Fatalf("timeout: err %v; want a retry error", err)
	}
	r.Delay(0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got, reason, err := e.Extract(context.Background(), nil, rec, nil); err != nil || string(got) != "ev-7" {
				t.Errorf("after recovery: %q, %v, %v", got, reason, err)
			}
		})
	}
	wg.Wait()
	if n := r.IDRequests(id); n != 1 {
		t.Errorf("schema fetched %d times, want once", n)
	}
}

// TestRegistryAuth checks basic auth and the start-up check.
func TestRegistryAuth(t *testing.T) {
	r := registrytest.NewTLS()
	defer r.Close()
	r.RequireAuth("kdedup", "s3cret")
	tlsCfg := r.Server().Client().Transport.(*http.Transport).TLSClientConfig
	bad, _ := NewRegistry(RegistryConfig{URL: r.URL(), TLS: tlsCfg})
	if err := bad.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("Check without credentials: %v, want a 401", err)
	}
	good, _ := NewRegistry(RegistryConfig{URL: r.URL(), TLS: tlsCfg, Username: "kdedup", Password: "s3cret"})
	if err := good.Check(context.Background()); err != nil {
		t.Errorf("Check: %v", err)
	}
	plain, _ := NewRegistry(RegistryConfig{URL: r.URL(), Username: "kdedup", Password: "s3cret"})
	if err := plain.Check(context.Background()); err == nil {
		t.Error("Check against an untrusted certificate succeeded")
	}
	for _, u := range []string{"", "registry:8081", "ftp://x", "http://"} {
		if _, err := NewRegistry(RegistryConfig{URL: u}); err == nil {
			t.Errorf("NewRegistry(%q) accepted", u)
		}
	}
}

// TestSchemaExtractAllocs checks that extraction allocates nothing once the schema is cached.
func TestSchemaExtractAllocs(t *testing.T) {
	r := registrytest.New()
	defer r.Close()
	av := r.Register("a-value", "", avroV1)
	r.Register("common.proto", "PROTOBUF", protoCommon)
	pb := r.Register("p-value", "PROTOBUF", protoV1, registrytest.Reference{Name: "common.proto", Subject: "common.proto", Version: 1})
	reg := newRegistry(t, r)
	for _, c := range []struct {
		spec  string
		value []byte
	}{
		{"avro:meta.id", wire(av, encodeAvro(t, avroV1, eventV1("ev-1", 3)))},
		{"protobuf:meta.id", wire(pb, []byte{2, 2}, protoEvent(protoMeta("ev-1", 300, false), false))},
	} {
		e := newExtractor(t, c.spec, reg)
		ctx := context.Background()
		if _, _, err := e.Extract(ctx, nil, c.value, nil); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(1000, func() { e.Extract(ctx, nil, c.value, nil) }); n != 0 {
			t.Errorf("%s: %v allocations per Extract", c.spec, n)
		}
	}
}

// unknownRegistry knows no schema, and counts the requests.
type unknownRegistry struct{ requests int }

func (u *unknownRegistry) Schema(context.Context, uint32) (Schema, error) {
	u.requests++
	return Schema{}, fmt.Errorf("%w: 404", ErrUnknownSchema)
}

func (u *unknownRegistry) Check(context.Context) error { return nil }

// TestUnknownIDsBounded proves that records with made-up schema ids cannot grow the cache without
// bound, and that a known-unknown id is not asked for again.
func TestUnknownIDsBounded(t *testing.T) {
	reg := &unknownRegistry{}
	e := newExtractor(t, "avro:id", reg)
	for id := range maxUnknownIDs + 100 {
		if _, r, err := e.Extract(context.Background(), nil, wire(id, []byte{2, 'x'}), nil); r != UnknownSchema || err != nil {
			t.Fatalf("id %d: %v, %v", id, r, err)
		}
	}
	if n := len(*e.schemas.plans.Load()); n != maxUnknownIDs {
		t.Errorf("%d plans cached, want at most %d", n, maxUnknownIDs)
	}
	before := reg.requests
	e.Extract(context.Background(), nil, wire(7, []byte{2, 'x'}), nil)
	if reg.requests != before {
		t.Error("a cached unknown id was asked for again")
	}
}
