package identity

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// stdlibJSONPath resolves path in data with encoding/json's token stream,
// independently of jsonPath, and is the oracle the tests compare against.
// Like jsonPath it takes the first member with a given name. It reports the
// target's kind ('s' string, 'n' number, 'b' true/false, '{' object, '['
// array, or 0 when there is no target: missing member, null, non-object on
// the path) and, for scalars, its decoded value (json.Number text for
// numbers). data must be valid JSON.
func stdlibJSONPath(t testing.TB, data []byte, path []string) (kind byte, val string) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	token := func() json.Token {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("encoding/json on valid input %q: %v", data, err)
		}
		return tok
	}
	skip := func() { // skips one value
		depth := 0
		for {
			if d, ok := token().(json.Delim); ok {
				if d == '{' || d == '[' {
					depth++
				} else {
					depth--
				}
			}
			if depth == 0 {
				return
			}
		}
	}
	if len(path) == 0 {
		return 0, ""
	}
segments:
	for k, seg := range path {
		if d, ok := token().(json.Delim); !ok || d != '{' {
			return 0, ""
		}
		for dec.More() {
			name := token().(string)
			if name != seg {
				skip()
				continue
			}
			if k < len(path)-1 {
				continue segments
			}
			switch v := token().(type) {
			case string:
				return 's', v
			case json.Number:
				return 'n', string(v)
			case bool:
				if v {
					return 'b', "true"
				}
				return 'b', "false"
			case json.Delim:
				return byte(v), ""
			default: // null
				return 0, ""
			}
		}
		return 0, ""
	}
	return 0, ""
}

// jsonNesting returns the deepest nesting of brackets in data, ignoring
// brackets inside strings.
func jsonNesting(data []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// comparableWithStdlib reports whether encoding/json is an oracle for data:
// it must be valid JSON, valid UTF-8 (encoding/json replaces invalid UTF-8
// with U+FFFD, jsonPath keeps the bytes), and within jsonPath's depth limit.
func comparableWithStdlib(data []byte) bool {
	return json.Valid(data) && utf8.Valid(data) && jsonNesting(data) <= maxJSONDepth
}

// checkAgainstStdlib fails t unless jsonPath's answer (id, ok) for valid
// JSON data agrees with encoding/json.
func checkAgainstStdlib(t testing.TB, data []byte, path []string, id []byte, ok bool) {
	t.Helper()
	kind, val := stdlibJSONPath(t, data, path)
	switch kind {
	case 0:
		if ok {
			t.Fatalf("jsonPath(%q, %q) = %q, but encoding/json finds no target", data, path, id)
		}
	case 's', 'n', 'b':
		wantOK := val != "" // the empty string is no identity
		if ok != wantOK || string(id) != val {
			t.Fatalf("jsonPath(%q, %q) = %q, %v; encoding/json says %q", data, path, id, ok, val)
		}
	case '{', '[':
		if !ok || id[0] != kind || !json.Valid(id) || !bytes.Contains(data, id) {
			t.Fatalf("jsonPath(%q, %q) = %q, %v; want the raw %c...%c value from the input", data, path, id, ok, kind, kind+2)
		}
	}
}

// FuzzJSONPath checks that jsonPath never panics, never returns an empty
// identity, and agrees with encoding/json on valid input.
func FuzzJSONPath(f *testing.F) {
	seeds := []struct {
		data string
		path string
	}{
		{`{"id":"x"}`, "id"},
		{`{"meta":{"id":"a\u0062"}}`, "meta.id"},
		{`{"meta":{"id":-12.5e+3}}`, "meta.id"},
		{`{"a":[1,{"b":"}"},[]],"id":true}`, "id"},
		{`{"id":"first","id":"second"}`, "id"},
		{`{"m\u0065ta":{"id":"\ud83d\ude00\ud800\u0041"}}`, "meta.id"},
		{` { "o" : { "k" : [ 1 , 2 ] } } `, "o"},
		{`{"a":null,"b":{},"c":[],"d":false}`, "d"},
		{`{"":{"":"e"}}`, "."},
		{`{"id":"\"\\\/\b\f\n\r\t"}`, "id"},
		{`[{"id":1}]`, "id"},
		{`{"id":12ab}`, "id"},
		{`{"id":"x",`, "id"},
		{`{"a":[[[[[[]]]]]],"id":0}`, "id"},
	}
	for _, s := range seeds {
		f.Add([]byte(s.data), s.path)
	}
	f.Fuzz(func(t *testing.T, data []byte, path string) {
		segs := strings.Split(path, ".")
		id, ok := jsonPath(data, segs)
		if ok && len(id) == 0 {
			t.Fatalf("jsonPath(%q, %q) returned an empty identity", data, segs)
		}
		if !ok && id != nil {
			t.Fatalf("jsonPath(%q, %q) returned %q with ok == false", data, segs, id)
		}
		if comparableWithStdlib(data) {
			checkAgainstStdlib(t, data, segs, id, ok)
		}
	})
}
