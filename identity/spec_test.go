package identity

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

type testHeader struct {
	name  string
	value []byte
}

// headerSeq returns an iterator over hs in the form Extract takes.
func headerSeq(hs ...testHeader) func(yield func(string, []byte) bool) {
	return func(yield func(string, []byte) bool) {
		for _, h := range hs {
			if !yield(h.name, h.value) {
				return
			}
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    Spec
		wantErr string // substring of the error; "" means success
	}{
		{in: "key", want: Spec{}},
		{in: "value", want: Spec{Kind: KindValue}},
		{in: "header:id", want: Spec{Kind: KindHeader, Name: "id"}},
		{in: "header:X-Message-Id", want: Spec{Kind: KindHeader, Name: "X-Message-Id"}},
		{in: "header:a:b", want: Spec{Kind: KindHeader, Name: "a:b"}},
		{in: "header: spaced ", want: Spec{Kind: KindHeader, Name: " spaced "}},
		{in: "json:id", want: Spec{Kind: KindJSON, Path: []string{"id"}}},
		{in: "json:meta.id", want: Spec{Kind: KindJSON, Path: []string{"meta", "id"}}},
		{in: "json:a.b.c.0", want: Spec{Kind: KindJSON, Path: []string{"a", "b", "c", "0"}}},
		{in: "json:a:b", want: Spec{Kind: KindJSON, Path: []string{"a:b"}}},
		{in: "avro:meta.id", want: Spec{Kind: KindAvro, Path: []string{"meta", "id"}}},
		{in: "avro-key:id", want: Spec{Kind: KindAvro, Path: []string{"id"}, FromKey: true}},
		{in: "protobuf:a_1.B", want: Spec{Kind: KindProtobuf, Path: []string{"a_1", "B"}}},
		{in: "protobuf-key:_x", want: Spec{Kind: KindProtobuf, Path: []string{"_x"}, FromKey: true}},
		{in: "avro:", wantErr: "empty Avro path"},
		{in: "avro:meta..id", wantErr: "element 2 of 3 is empty"},
		{in: "avro:meta.1d", wantErr: `"1d" is not a field name`},
		{in: "protobuf:a-b", wantErr: `"a-b" is not a field name`},
		{in: "protobuf-key", wantErr: "empty Protobuf path"},
		{in: "json-key:a", wantErr: `unknown kind "json-key"`},

		{in: "", wantErr: "identity: empty key spec"},
		{in: ":x", wantErr: "missing kind"},
		{in: "Key", wantErr: `unknown kind "Key"`},
		{in: " key", wantErr: `unknown kind " key"`},
		{in: "keys", wantErr: `unknown kind "keys"`},
		{in: "jsonpath:a", wantErr: `unknown kind "jsonpath"`},
		{in: "key:x", wantErr: `kind "key" takes no argument`},
		{in: "key:", wantErr: `kind "key" takes no argument`},
		{in: "value:x", wantErr: `kind "value" takes no argument`},
		{in: "header", wantErr: "empty header name"},
		{in: "header:", wantErr: "empty header name"},
		{in: "json", wantErr: "empty JSON path"},
		{in: "json:", wantErr: "empty JSON path"},
		{in: "json:.id", wantErr: "element 1 of 2 is empty"},
		{in: "json:meta.", wantErr: "element 2 of 2 is empty"},
		{in: "json:a..b", wantErr: "element 2 of 3 is empty"},
		{in: "json:.", wantErr: "element 1 of 2 is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Parse(%q) = %+v, want error containing %q", tt.in, got, tt.wantErr)
				}
				if !strings.HasPrefix(err.Error(), "identity: ") || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q) error = %q, want prefix \"identity: \" and %q", tt.in, err, tt.wantErr)
				}
				if !reflect.DeepEqual(got, Spec{}) {
					t.Fatalf("Parse(%q) returned %+v with an error, want the zero Spec", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q) error: %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Parse(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
			if s := got.String(); s != tt.in {
				t.Fatalf("Parse(%q).String() = %q, want the input back", tt.in, s)
			}
		})
	}
}

func TestKeySpecString(t *testing.T) {
	tests := []struct {
		spec Spec
		want string
	}{
		{Spec{}, "key"},
		{Spec{Kind: KindValue}, "value"},
		{Spec{Kind: KindHeader, Name: "trace"}, "header:trace"},
		{Spec{Kind: KindJSON, Path: []string{"meta", "id"}}, "json:meta.id"},
		{Spec{Kind: Kind(9)}, "Kind(9)"},
	}
	for _, tt := range tests {
		if got := tt.spec.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.spec, got, tt.want)
		}
	}
	if _, err := Parse(Spec{Kind: Kind(9)}.String()); err == nil {
		t.Error("Parse accepted the String of an unknown kind")
	}
}

// FuzzParse checks that every accepted spec survives String and that
// Parse never panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"key", "value", "header:x", "json:a.b", "json:a..b", "", "header:", "x:y:z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := Parse(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "identity: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
			return
		}
		again, err := Parse(spec.String())
		if err != nil || !reflect.DeepEqual(again, spec) {
			t.Fatalf("round trip of %q: %#v -> %q -> %#v, %v", s, spec, spec.String(), again, err)
		}
	})
}

func TestExtract(t *testing.T) {
	var (
		key   = []byte("k1")
		value = []byte(`{"meta":{"id":"m-1","n":42},"id":"top","esc":"a\u0062","tags":[1,{"id":"no"}]}`)
		hdrs  = headerSeq(
			testHeader{"trace", []byte("t-1")},
			testHeader{"id", []byte("h-1")},
			testHeader{"id", []byte("h-2")},
			testHeader{"empty", []byte{}},
			testHeader{"empty2", nil},
		)
	)
	spec := func(s string) Spec {
		t.Helper()
		k, err := Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	tests := []struct {
		name    string
		spec    Spec
		key     []byte
		value   []byte
		headers func(func(string, []byte) bool)
		want    string
		wantOK  bool
	}{
		{name: "zero spec is the kafka key", spec: Spec{}, key: key, value: value, headers: hdrs, want: "k1", wantOK: true},
		{name: "key", spec: spec("key"), key: key, want: "k1", wantOK: true},
		{name: "key nil", spec: spec("key"), key: nil, value: value},
		{name: "key empty", spec: spec("key"), key: []byte{}, value: value},
		{name: "key binary", spec: spec("key"), key: []byte{0, 0xff, 0}, want: "\x00\xff\x00", wantOK: true},

		{name: "value", spec: spec("value"), key: key, value: value, want: string(value), wantOK: true},
		{name: "value tombstone", spec: spec("value"), key: key, value: nil},
		{name: "value empty", spec: spec("value"), key: key, value: []byte{}},

		{name: "header", spec: spec("header:trace"), headers: hdrs, want: "t-1", wantOK: true},
		{name: "header first of duplicates wins", spec: spec("header:id"), headers: hdrs, want: "h-1", wantOK: true},
		{name: "header missing", spec: spec("header:nope"), headers: hdrs},
		{name: "header name is case sensitive", spec: spec("header:ID"), headers: hdrs},
		{name: "header nil iterator", spec: spec("header:id"), headers: nil},
		{name: "header empty iterator", spec: spec("header:id"), headers: headerSeq()},
		{name: "header empty value", spec: spec("header:empty"), headers: hdrs},
		{name: "header nil value", spec: spec("header:empty2"), headers: hdrs},
		{name: "header ignores key and value", spec: spec("header:trace"), key: key, value: value, headers: hdrs, want: "t-1", wantOK: true},

		{name: "json top level", spec: spec("json:id"), value: value, want: "top", wantOK: true},
		{name: "json nested", spec: spec("json:meta.id"), value: value, want: "m-1", wantOK: true},
		{name: "json number", spec: spec("json:meta.n"), value: value, want: "42", wantOK: true},
		{name: "json object", spec: spec("json:meta"), value: value, want: `{"id":"m-1","n":42}`, wantOK: true},
		{name: "json escapes decoded", spec: spec("json:esc"), value: value, want: "ab", wantOK: true},
		{name: "json missing", spec: spec("json:meta.nope"), value: value},
		{name: "json through non-object", spec: spec("json:id.x"), value: value},
		{name: "json through array", spec: spec("json:tags.1.id"), value: value},
		{name: "json tombstone", spec: spec("json:id"), value: nil},
		{name: "json not json", spec: spec("json:id"), value: []byte("id=1")},
		{name: "json ignores key", spec: spec("json:id"), key: key, value: []byte(`[]`)},

		{name: "unknown kind", spec: Spec{Kind: Kind(200)}, key: key, value: value, headers: hdrs},
		{name: "json empty path", spec: Spec{Kind: KindJSON}, value: value},
		{name: "json hand-built path with dot", spec: Spec{Kind: KindJSON, Path: []string{"a.b"}}, value: []byte(`{"a.b":"x"}`), want: "x", wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, ok := tt.spec.Extract(tt.key, tt.value, tt.headers)
			if ok != tt.wantOK || string(id) != tt.want {
				t.Fatalf("%v.Extract = %q, %v; want %q, %v", tt.spec, id, ok, tt.want, tt.wantOK)
			}
			if !ok && id != nil {
				t.Fatalf("Extract returned %q with ok == false, want nil", id)
			}
		})
	}
}

// TestExtractAliases checks the documented aliasing: ids for key, value,
// header and unescaped JSON strings point into the caller's bytes.
func TestExtractAliases(t *testing.T) {
	key := []byte("kk")
	value := []byte(`{"id":"vv","e":"\u0041"}`)
	hv := []byte("hh")
	hdrs := headerSeq(testHeader{"h", hv})
	tests := []struct {
		spec  string
		inner []byte // the buffer id must alias; nil means it must not alias value
	}{
		{"key", key},
		{"value", value},
		{"header:h", hv},
		{"json:id", value},
		{"json:e", nil},
	}
	for _, tt := range tests {
		spec, err := Parse(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		id, ok := spec.Extract(key, value, hdrs)
		if !ok {
			t.Fatalf("%s: no identity", tt.spec)
		}
		if got := overlaps(id, value) || overlaps(id, key) || overlaps(id, hv); got != (tt.inner != nil) {
			t.Errorf("%s: id aliases input = %v, want %v", tt.spec, got, tt.inner != nil)
		}
		if tt.inner != nil && !overlaps(id, tt.inner) {
			t.Errorf("%s: id does not alias the expected buffer", tt.spec)
		}
	}
}

// overlaps reports whether a is a subslice of b's backing array range.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	for i := range b {
		if &b[i] == &a[0] {
			return true
		}
	}
	return false
}

// TestExtractStopsHeaderIteration checks that Extract stops the iterator at
// the first match and tolerates an iterator that ignores the stop.
func TestExtractStopsHeaderIteration(t *testing.T) {
	spec := Spec{Kind: KindHeader, Name: "id"}
	calls := 0
	stopping := func(yield func(string, []byte) bool) {
		for _, h := range []string{"a", "id", "b", "c"} {
			calls++
			if !yield(h, []byte(h+"-v")) {
				return
			}
		}
	}
	if id, ok := spec.Extract(nil, nil, stopping); !ok || string(id) != "id-v" {
		t.Fatalf("Extract = %q, %v", id, ok)
	}
	if calls != 2 {
		t.Fatalf("iterator produced %d headers, want 2 (stop after the match)", calls)
	}
	rude := func(yield func(string, []byte) bool) {
		yield("id", []byte("first"))
		yield("id", []byte("second"))
	}
	if id, ok := spec.Extract(nil, nil, rude); !ok || string(id) != "first" {
		t.Fatalf("Extract with an iterator that ignores false = %q, %v; want first", id, ok)
	}
}

func TestExtractAllocs(t *testing.T) {
	key := []byte("some-key")
	value := []byte(`{"a":[1,2,{"x":"y\n"}],"meta":{"skip":"s\"q","id":"abc-123"},"esc":"x\u00e9y"}`)
	hs := []testHeader{{"a", []byte("1")}, {"id", []byte("hdr")}}
	hdrs := func(yield func(string, []byte) bool) {
		for _, h := range hs {
			if !yield(h.name, h.value) {
				return
			}
		}
	}
	tests := []struct {
		spec string
		want float64
	}{
		{"key", 0},
		{"value", 0},
		{"header:id", 0},
		{"header:missing", 0},
		{"json:meta.id", 0},
		{"json:meta.missing", 0},
		{"json:esc", 1},
	}
	for _, tt := range tests {
		spec, err := Parse(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		var sink []byte
		got := testing.AllocsPerRun(1000, func() {
			sink, _ = spec.Extract(key, value, hdrs)
		})
		_ = sink
		if got != tt.want {
			t.Errorf("%s: %v allocs per Extract, want %v", tt.spec, got, tt.want)
		}
	}
}

// TestExtractConcurrent shares one Spec per kind among goroutines; run it
// with -race to check Extract's concurrency claim, including the pooled
// header lookup state.
func TestExtractConcurrent(t *testing.T) {
	specs := []string{"key", "value", "header:id", "json:meta.id", "json:esc"}
	const goroutines, rounds = 8, 2000
	for _, s := range specs {
		spec, err := Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for r := range rounds {
					want := fmt.Sprintf("g%d-r%d", g, r)
					key := []byte(want)
					value := fmt.Appendf(nil, `{"meta":{"id":%q},"esc":"%s\u0021"}`, want, want)
					hdrs := headerSeq(testHeader{"x", []byte("other")}, testHeader{"id", []byte(want)})
					id, ok := spec.Extract(key, value, hdrs)
					switch {
					case !ok:
						t.Errorf("%s: no identity for %s", s, want)
						return
					case s == "value":
						if !bytes.Equal(id, value) {
							t.Errorf("%s: got %q", s, id)
							return
						}
					case s == "json:esc":
						if string(id) != want+"!" {
							t.Errorf("%s: got %q, want %q", s, id, want+"!")
							return
						}
					default:
						if string(id) != want {
							t.Errorf("%s: got %q, want %q", s, id, want)
							return
						}
					}
				}
			})
		}
		wg.Wait()
	}
}

// TestReasons checks the reason of each kind of record without an identity, and that Reasons
// lists the fixed label set.
func TestReasons(t *testing.T) {
	if got := strings.Join(Reasons(), ","); got != "missing,malformed,not_wire_format,unknown_schema,not_in_schema" {
		t.Errorf("Reasons() = %s", got)
	}
	if Reason(200).String() != "unknown" || NumReasons != len(Reasons())+1 {
		t.Error("Reason out of range")
	}
	for _, tt := range []struct {
		spec  string
		key   string
		value string
		want  Reason
	}{
		{"key", "", "v", Missing},
		{"value", "k", "", Missing},
		{"header:x", "k", "v", Missing},
		{"key-prefix::", "nosep", "", Missing},
		{"json:id", "", `{"other":1}`, Missing},
		{"json:id", "", `{"id":null}`, Missing},
		{"json:id.x", "", `{"id":"s"}`, Missing},
		{"json:id", "", `  [1]`, Malformed},
		{"json:id", "", `id=1`, Malformed},
		{"json:id", "", ``, Malformed},
	} {
		sp, err := ParseSource(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		e, err := New(sp, Options{})
		if err != nil {
			t.Fatal(err)
		}
		id, r, err := e.Extract(context.Background(), []byte(tt.key), []byte(tt.value), nil)
		if id != nil || r != tt.want || err != nil {
			t.Errorf("%s on key %q value %q: %q, %v, %v; want %v", tt.spec, tt.key, tt.value, id, r, err, tt.want)
		}
	}
	if _, err := New(Spec{Kind: KindAvro, Path: []string{"id"}}, Options{}); err == nil || !strings.Contains(err.Error(), "SCHEMA_REGISTRY_URL") {
		t.Errorf("New(avro) without a registry: %v", err)
	}
}
