package identity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestJSONPath(t *testing.T) {
	const none = "\x00none" // marks ok == false
	tests := []struct {
		name string
		data string
		path string // dot-separated
		want string // none for ok == false
	}{
		// Scalars.
		{"string", `{"id":"abc"}`, "id", "abc"},
		{"integer", `{"id":42}`, "id", "42"},
		{"negative zero", `{"id":-0}`, "id", "-0"},
		{"fraction exponent", `{"id":-1.5e+10}`, "id", "-1.5e+10"},
		{"exponent upper", `{"id":0.1E-2}`, "id", "0.1E-2"},
		{"number kept as written", `{"id":1.0}`, "id", "1.0"},
		{"true", `{"id":true}`, "id", "true"},
		{"false", `{"id":false}`, "id", "false"},
		{"null", `{"id":null}`, "id", none},
		{"empty string", `{"id":""}`, "id", none},
		{"raw utf8", `{"id":"héllo ✓"}`, "id", "héllo ✓"},
		{"invalid utf8 kept as is", "{\"id\":\"a\xffb\"}", "id", "a\xffb"},

		// Escapes in the target decode to the same identity as the plain string.
		{"escape same as plain", `{"id":"a\u0062"}`, "id", "ab"},
		{"simple escapes", `{"id":"\"\\\/\b\f\n\r\t"}`, "id", "\"\\/\b\f\n\r\t"},
		{"upper hex", `{"id":"\u00E9\u00e9"}`, "id", "éé"},
		{"nul escape", `{"id":"a\u0000b"}`, "id", "a\x00b"},
		{"surrogate pair", `{"id":"\ud83d\ude00"}`, "id", "😀"},
		{"lone high surrogate", `{"id":"\ud800x"}`, "id", "\uFFFDx"},
		{"lone low surrogate", `{"id":"\udc00"}`, "id", "\uFFFD"},
		{"low then low", `{"id":"\udc00\udc00"}`, "id", "\uFFFD\uFFFD"},
		{"pair reversed", `{"id":"\ude00\ud83d"}`, "id", "\uFFFD\uFFFD"},
		{"high then non-surrogate", `{"id":"\ud800\u0041"}`, "id", "\uFFFDA"},
		{"high then high", `{"id":"\ud800\ud800\udc00"}`, "id", "\uFFFD𐀀"},
		{"surrogate then escaped quote", `{"id":"\ud800\""}`, "id", "\uFFFD\""},

		// Member names.
		{"escaped name matches", `{"m\u0065ta":{"i\u0064":1}}`, "meta.id", "1"},
		{"escaped quote in name", `{"a\"b":"q"}`, "a\"b", "q"},
		{"escaped name longer", `{"id\u0041":"no","id":"yes"}`, "id", "yes"},
		{"escaped name shorter", `{"\u0069":"no","id":"yes"}`, "id", "yes"},
		{"unicode name", `{"ключ":"v"}`, "ключ", "v"},
		{"empty name", `{"":{"":"e"}}`, ".", "e"},
		{"name is case sensitive", `{"ID":"x"}`, "id", none},
		{"name prefix", `{"idx":"x","i":"y"}`, "id", none},

		// Paths and skipping.
		{"nested", `{"meta":{"id":"m"}}`, "meta.id", "m"},
		{"deep path", `{"a":{"b":{"c":{"d":"x"}}}}`, "a.b.c.d", "x"},
		{"skips nested values", `{"a":[[],{},[{"b":[1,{"c":null}]}]],"s":"}]\"{[","n":-1e5,"t":true,"f":false,"z":null,"id":"z"}`, "id", "z"},
		{"skips siblings on the path", `{"x":{"id":"no"},"meta":{"y":[{"id":"no"}],"id":"yes"}}`, "meta.id", "yes"},
		{"whitespace everywhere", " \t\n\r{ \"a\" : [ 1 , { } , [ ] ] ,\n \"id\" : \"v\" \n}\n", "id", "v"},
		{"object target raw", `{"o": { "b" : 1 , "a":2}}`, "o", `{ "b" : 1 , "a":2}`},
		{"array target raw", `{"o":[1, "]", {}]}`, "o", `[1, "]", {}]`},
		{"empty object target", `{"o":{}}`, "o", `{}`},
		{"empty array target", `{"o":[]}`, "o", `[]`},
		{"missing", `{"a":1}`, "id", none},
		{"empty root", `{}`, "id", none},
		{"empty nested", `{"meta":{}}`, "meta.id", none},
		{"through string", `{"meta":"x"}`, "meta.id", none},
		{"through number", `{"meta":1}`, "meta.id", none},
		{"through null", `{"meta":null}`, "meta.id", none},
		{"through array", `{"meta":[{"id":"x"}]}`, "meta.id", none},
		{"array index not supported", `{"meta":[{"id":"x"}]}`, "meta.0.id", none},
		{"root array", `[{"id":1}]`, "id", none},
		{"root string", `"id"`, "id", none},
		{"root number", `1`, "id", none},
		{"root null", `null`, "id", none},
		{"empty input", ``, "id", none},
		{"whitespace input", " \n", "id", none},

		// Duplicate names: the first occurrence wins, even when it does not lead anywhere.
		{"duplicate first wins", `{"id":"first","id":"second"}`, "id", "first"},
		{"duplicate nested first wins", `{"meta":{"id":"a"},"meta":{"id":"b"}}`, "meta.id", "a"},
		{"duplicate first is a dead end", `{"meta":1,"meta":{"id":"b"}}`, "meta.id", none},
		{"duplicate first is null", `{"id":null,"id":"b"}`, "id", none},

		// Malformed JSON before or at the target.
		{"missing colon", `{"id" "x"}`, "id", none},
		{"missing comma", `{"a":1 "id":2}`, "id", none},
		{"leading comma", `{,"id":1}`, "id", none},
		{"double comma", `{"a":1,,"id":1}`, "id", none},
		{"single quotes", `{'id':1}`, "id", none},
		{"unquoted name", `{id:1}`, "id", none},
		{"bad literal", `{"a":tru,"id":1}`, "id", none},
		{"leading zero", `{"a":01,"id":1}`, "id", none},
		{"bare dot", `{"a":1.,"id":1}`, "id", none},
		{"lone minus", `{"a":-,"id":1}`, "id", none},
		{"empty exponent", `{"a":1e,"id":1}`, "id", none},
		{"plus sign", `{"a":+1,"id":1}`, "id", none},
		{"control char in string", "{\"a\":\"\x01\",\"id\":1}", "id", none},
		{"control char in name", "{\"i\nd\":1}", "i\nd", none},
		{"bad escape", `{"a":"\q","id":1}`, "id", none},
		{"short unicode escape", `{"a":"\u12","id":1}`, "id", none},
		{"bad hex", `{"a":"\u12g4","id":1}`, "id", none},
		{"mismatched brackets", `{"a":[1,2},"id":1}`, "id", none},
		{"mismatched braces", `{"a":{"b":1]},"id":1}`, "id", none},
		{"trailing comma array", `{"a":[1,],"id":1}`, "id", none},
		{"trailing comma object", `{"a":{"b":1,},"id":1}`, "id", none},
		{"leading comma array", `{"a":[,1],"id":1}`, "id", none},
		{"object without value", `{"a":{"b"},"id":1}`, "id", none},
		{"unterminated string", `{"a":"abc`, "id", none},
		{"unterminated skip", `{"a":[1,2`, "id", none},
		{"missing value", `{"id":}`, "id", none},
		{"target run-on number", `{"id":12ab}`, "id", none},
		{"target run-on literal", `{"id":truex}`, "id", none},
		{"target bad number", `{"id":1.}`, "id", none},
		{"target leading dot", `{"id":.5}`, "id", none},
		{"target two strings", `{"id":"x" "y"}`, "id", none},
		{"target bad null", `{"id":nul}`, "id", none},
		{"target unterminated", `{"id":"x`, "id", none},
		{"target truncated after string", `{"id":"x"`, "id", none},
		{"target truncated after number", `{"id":1`, "id", none},
		{"target bad escape", `{"id":"\x"}`, "id", none},
		{"target bad object", `{"id":{"a":}}`, "id", none},
		{"target escaped then truncated", `{"id":"\n"`, "id", none},

		// The scanner stops at the target: damage after it is not noticed.
		{"garbage after target", `{"id":"x",garbage`, "id", "x"},
		{"garbage after root", `{"id":"x"} trailing`, "id", "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.data)
			path := strings.Split(tt.path, ".")
			id, ok := jsonPath(data, path)
			if tt.want == none {
				if ok || id != nil {
					t.Fatalf("jsonPath(%s, %q) = %q, %v; want no identity", tt.data, path, id, ok)
				}
			} else if !ok || string(id) != tt.want {
				t.Fatalf("jsonPath(%s, %q) = %q, %v; want %q", tt.data, path, id, ok, tt.want)
			}
			if comparableWithStdlib(data) {
				checkAgainstStdlib(t, data, path, id, ok)
			} else if json.Valid(data) && ok {
				// Valid but not comparable (invalid UTF-8): still a string found by encoding/json.
				if kind, _ := stdlibJSONPath(t, data, path); kind == 0 {
					t.Fatalf("encoding/json finds no target in %q", data)
				}
			}
		})
	}
}

// nest returns open, repeated n times, then inner, then close, repeated n times.
func nest(open, inner, close string, n int) []byte {
	var b bytes.Buffer
	b.Grow(n*(len(open)+len(close)) + len(inner))
	for range n {
		b.WriteString(open)
	}
	b.WriteString(inner)
	for range n {
		b.WriteString(close)
	}
	return b.Bytes()
}

// TestJSONPathDeep checks the nesting limit: deep input yields no identity
// instead of exhausting memory or the stack, and input just inside the limit
// still works.
func TestJSONPathDeep(t *testing.T) {
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	deepPath := func(n int) []string {
		p := make([]string, n)
		for i := range p {
			p[i] = "a"
		}
		return p
	}
	tests := []struct {
		name string
		data []byte
		path []string
		want string // "" for ok == false
	}{
		// The root object is level 1, so a sibling may open maxJSONDepth-1 more levels.
		{"sibling at limit", cat([]byte(`{"a":`), nest("[", "", "]", maxJSONDepth-1), []byte(`,"id":1}`)), []string{"id"}, "1"},
		{"sibling over limit", cat([]byte(`{"a":`), nest("[", "", "]", maxJSONDepth), []byte(`,"id":1}`)), []string{"id"}, ""},
		{"sibling objects over limit", cat([]byte(`{"a":`), nest(`{"b":`, "1", "}", maxJSONDepth), []byte(`,"id":1}`)), []string{"id"}, ""},
		{"million brackets", cat([]byte(`{"a":`), nest("[", "", "]", 1_000_000), []byte(`,"id":1}`)), []string{"id"}, ""},
		{"million unclosed", cat([]byte(`{"a":`), bytes.Repeat([]byte("["), 1_000_000)), []string{"id"}, ""},
		{"target container at limit", cat([]byte(`{"o":`), nest("[", "", "]", maxJSONDepth-1), []byte(`}`)), []string{"o"}, string(nest("[", "", "]", maxJSONDepth-1))},
		{"target container over limit", cat([]byte(`{"o":`), nest("[", "", "]", maxJSONDepth), []byte(`}`)), []string{"o"}, ""},
		{"path at limit", nest(`{"a":`, `"x"`, "}", maxJSONDepth), deepPath(maxJSONDepth), "x"},
		{"path over limit", nest(`{"a":`, `"x"`, "}", maxJSONDepth+1), deepPath(maxJSONDepth + 1), ""},
		{"deep after target is not read", cat([]byte(`{"id":1,"z":`), bytes.Repeat([]byte("["), 1_000_000)), []string{"id"}, "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, ok := jsonPath(tt.data, tt.path)
			if ok != (tt.want != "") || string(id) != tt.want {
				t.Fatalf("jsonPath = %.40q (len %d), %v; want %.40q", id, len(id), ok, tt.want)
			}
			if comparableWithStdlib(tt.data) {
				checkAgainstStdlib(t, tt.data, tt.path, id, ok)
			}
		})
	}
}

// TestJSONPathHuge checks correctness on inputs larger than Kafka's default
// 1 MiB message limit, against encoding/json.
func TestJSONPathHuge(t *testing.T) {
	const mib = 1 << 20
	var escaped strings.Builder
	for i := range mib / 8 {
		fmt.Fprintf(&escaped, `\u%04x\n`, 0x20+i%0x5000)
	}
	var numbers bytes.Buffer
	numbers.WriteString(`{"nums":[`)
	for i := range 200_000 {
		if i > 0 {
			numbers.WriteByte(',')
		}
		fmt.Fprintf(&numbers, "%d.%de-%d", i, i%7, i%3)
	}
	numbers.WriteString(`],"id":"after-array"}`)
	tests := []struct {
		name string
		data []byte
		path string
	}{
		{"4 MiB string before target", []byte(`{"blob":"` + strings.Repeat("x\\\"", 4*mib/3) + `","id":"end"}`), "id"},
		{"200k numbers before target", numbers.Bytes(), "id"},
		{"many members before target", []byte("{" + strings.Repeat(`"k":{"a":[1,"b"]},`, mib/64) + `"id":7}`), "id"},
		{"escaped 1 MiB target", []byte(`{"id":"` + escaped.String() + `"}`), "id"},
		{"4 MiB plain target", []byte(`{"id":"` + strings.Repeat("é", 2*mib) + `"}`), "id"},
		{"target first then 4 MiB", []byte(`{"id":"first","blob":"` + strings.Repeat("y", 4*mib) + `"}`), "id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := strings.Split(tt.path, ".")
			id, ok := jsonPath(tt.data, path)
			if !ok {
				t.Fatal("no identity")
			}
			checkAgainstStdlib(t, tt.data, path, id, ok)
		})
	}
}

// benchRecord is a typical event of about 700 bytes whose identity sits in
// the middle, after an array and nested objects that must be skipped.
var benchRecord = []byte(`{"type":"order.updated","version":3,"source":"checkout-service",` +
	`"time":"2026-03-01T12:34:56.789Z","tags":["eu-west-1","priority",{"k":"v"}],` +
	`"customer":{"id":"c-99812","name":"Ada \"The Countess\" Lovelace","email":"ada@example.com",` +
	`"address":{"street":"12 Analytical Engine Way","city":"London","zip":"N1 9GU","geo":[51.5362,-0.1052]}},` +
	`"meta":{"trace":"4bf92f3577b34da6a3ce929d0e0e4736","partition":7,"id":"ord-2026-03-01-000123456"},` +
	`"items":[{"sku":"A-1","qty":2,"price":19.99},{"sku":"B-22","qty":1,"price":5.5},{"sku":"C-333","qty":10,"price":0.25}],` +
	`"total":47.98,"currency":"EUR","paid":true,"notes":null,"comment":"deliver after 5pm\nring twice"}`)

// stdlibMapLookup is the baseline: decode the whole value into a map and walk it.
func stdlibMapLookup(data []byte, path []string) (string, bool) {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return "", false
	}
	for _, seg := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		v = m[seg]
	}
	s, ok := v.(string)
	return s, ok && s != ""
}

func BenchmarkExtractJSON(b *testing.B) {
	spec, err := Parse("json:meta.id")
	if err != nil {
		b.Fatal(err)
	}
	const want = "ord-2026-03-01-000123456"
	if id, ok := spec.Extract(nil, benchRecord, nil); !ok || string(id) != want {
		b.Fatalf("Extract = %q, %v", id, ok)
	}
	if s, ok := stdlibMapLookup(benchRecord, spec.Path); !ok || s != want {
		b.Fatalf("baseline = %q, %v", s, ok)
	}
	impls := []struct {
		name string
		run  func() bool
	}{
		{"scanner", func() bool { _, ok := spec.Extract(nil, benchRecord, nil); return ok }},
		{"encoding_json_map", func() bool { _, ok := stdlibMapLookup(benchRecord, spec.Path); return ok }},
	}
	for _, impl := range impls {
		b.Run(impl.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(benchRecord)))
			for b.Loop() {
				if !impl.run() {
					b.Fatal("no identity")
				}
			}
		})
		b.Run(impl.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(benchRecord)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !impl.run() {
						b.Error("no identity")
						return
					}
				}
			})
		})
	}
}

// BenchmarkExtract measures the other kinds and an escaped JSON string; the
// kafka key read is the floor to compare them with.
func BenchmarkExtract(b *testing.B) {
	key := []byte("ord-2026-03-01-000123456")
	hs := []testHeader{
		{"traceparent", []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
		{"content-type", []byte("application/json")},
		{"message-id", []byte("ord-2026-03-01-000123456")},
	}
	hdrs := func(yield func(string, []byte) bool) {
		for _, h := range hs {
			if !yield(h.name, h.value) {
				return
			}
		}
	}
	escaped := []byte(`{"meta":{"id":"ord\u002d2026\u002d03\u002d01\u002d000123456"}}`)
	cases := []struct {
		spec  string
		value []byte
	}{
		{"key", benchRecord},
		{"header:message-id", benchRecord},
		{"json:meta.id", escaped},
	}
	for _, c := range cases {
		spec, err := Parse(c.spec)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.spec, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, ok := spec.Extract(key, c.value, hdrs); !ok {
						b.Error("no identity")
						return
					}
				}
			})
		})
	}
}

// TestSkipJSONPlain checks the eight-bytes-at-a-time scan against a byte-by-byte reference
// (jsonStrPlain) at every start of random strings made of the bytes next to the special ones:
// the quote, the backslash, the control characters' edge and bytes with the top bit set, so that
// a borrow between bytes or a high byte taken for a special one shows.
func TestSkipJSONPlain(t *testing.T) {
	alphabet := []byte{0x00, 0x01, 0x1f, 0x20, 0x21, '"', 0x23, 0x5b, '\\', 0x5d, 0x7f, 0x80, 0x81, 0xa1, 0xa2, 0xdc, 0xe0, 0xff, 'a'}
	plain := []byte{'a', 'z', 0x80, 0xe0}
	ref := func(data []byte, i int) int {
		for i < len(data) && jsonStrPlain[data[i]] {
			i++
		}
		return i
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 20000 {
		data := make([]byte, rng.IntN(40))
		plainRun := trial%2 == 0 // half the strings mostly plain, so that the scan runs past a word
		for j := range data {
			if plainRun && rng.IntN(16) != 0 {
				data[j] = plain[rng.IntN(len(plain))]
			} else {
				data[j] = alphabet[rng.IntN(len(alphabet))]
			}
		}
		for i := 0; i <= len(data); i++ {
			if got, want := skipJSONPlain(data, i), ref(data, i); got != want {
				t.Fatalf("skipJSONPlain(%x, %d) = %d, want %d", data, i, got, want)
			}
		}
	}
}
