package identity

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// maxJSONDepth is the deepest nesting of objects and arrays, counted from the
// document root, that jsonPath will walk or skip over. A document that nests
// deeper before the target is reached yields no identity. The scanner is
// iterative, so deep input cannot exhaust the goroutine stack; the limit
// bounds the fixed-size bracket stack in skipJSONValue.
const maxJSONDepth = 1024

// jsonPath returns the raw identity bytes of the value found by following
// path through nested JSON objects in data, reading data as a stream: it
// never builds a tree and never allocates, except to decode a string target
// that contains escape sequences.
//
// Each path element names a member of an object; the first member with that
// name wins when an object repeats a name. Member names are compared after
// decoding their escapes, so "m\u0065ta" matches meta.
//
// The result depends on the target's type:
//   - string: its contents. If the contents contain escapes they are decoded
//     into a new slice (so "a\u0062" and "ab" give the same identity);
//     otherwise the result is a subslice of data. Bytes outside escapes are
//     returned as they are, without UTF-8 validation.
//   - number, true, false: the literal's bytes, exactly as written, so 1,
//     1.0 and 1e0 are different identities.
//   - object, array: the raw bytes from the opening to the closing bracket,
//     so whitespace and member order are part of the identity.
//   - null, the empty string, a missing member, a non-object on the path,
//     malformed JSON, or nesting deeper than maxJSONDepth: ok is false.
//
// jsonPath validates the bytes it reads up to the end of the target and the
// delimiter after it; it does not read the rest of the document, so damage
// after the target goes unnoticed. It never panics.
func jsonPath(data []byte, path []string) (id []byte, ok bool) {
	if len(path) == 0 {
		return nil, false
	}
	i := skipJSONSpace(data, 0)
	for depth, seg := range path {
		// Enter the object at data[i].
		if i >= len(data) || data[i] != '{' || depth+1 > maxJSONDepth {
			return nil, false
		}
		i = skipJSONSpace(data, i+1)
		if i < len(data) && data[i] == '}' {
			return nil, false // empty object: member missing
		}
		for {
			// Member name.
			if i >= len(data) || data[i] != '"' {
				return nil, false
			}
			end, esc, ok := scanJSONString(data, i)
			if !ok {
				return nil, false
			}
			match := jsonStringEqual(data[i+1:end-1], esc, seg)
			i = skipJSONSpace(data, end)
			if i >= len(data) || data[i] != ':' {
				return nil, false
			}
			i = skipJSONSpace(data, i+1)
			if match {
				break
			}
			// Not ours: skip the member's value, then expect ',' or '}'.
			if i, ok = skipJSONValue(data, i, depth+1); !ok {
				return nil, false
			}
			// '}' here means the member is missing; anything else is malformed.
			if i = skipJSONSpace(data, i); i >= len(data) || data[i] != ',' {
				return nil, false
			}
			i = skipJSONSpace(data, i+1)
		}
		// data[i] starts the value of the member named seg.
		if depth == len(path)-1 {
			return jsonTarget(data, i, depth+1)
		}
	}
	return nil, false // unreachable: the loop returns on the last segment
}

// jsonTarget returns the identity of the value starting at data[i], the
// value of a member of an object at the given depth. It checks that the
// value is followed by ',' or '}' so that truncated or run-on literals
// such as 12ab are rejected.
func jsonTarget(data []byte, i, depth int) ([]byte, bool) {
	if i >= len(data) {
		return nil, false
	}
	var (
		end int
		ok  bool
		esc bool
	)
	switch c := data[i]; {
	case c == '"':
		end, esc, ok = scanJSONString(data, i)
	case c == '{' || c == '[':
		end, ok = skipJSONValue(data, i, depth)
	case c == 't':
		end, ok = scanJSONLiteral(data, i, "true")
	case c == 'f':
		end, ok = scanJSONLiteral(data, i, "false")
	case c == '-' || ('0' <= c && c <= '9'):
		end, ok = scanJSONNumber(data, i)
	default: // null, or not a value at all
		return nil, false
	}
	if !ok || !jsonFollowedByDelim(data, end) {
		return nil, false
	}
	if data[i] != '"' {
		return data[i:end], true
	}
	s := data[i+1 : end-1]
	switch {
	case esc:
		return unescapeJSONString(s), true // never empty: an escape decodes to at least one byte
	case len(s) == 0:
		return nil, false
	default:
		return s, true
	}
}

// jsonFollowedByDelim reports whether the next non-space byte at or after
// data[i] can end an object member: ',' or '}'.
func jsonFollowedByDelim(data []byte, i int) bool {
	i = skipJSONSpace(data, i)
	return i < len(data) && (data[i] == ',' || data[i] == '}')
}

// skipJSONSpace returns the index of the first byte at or after i that is
// not JSON whitespace, or len(data). Most calls find a token at once: a byte
// above the space is one compare.
func skipJSONSpace(data []byte, i int) int {
	for i < len(data) {
		if c := data[i]; c > ' ' || c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return i
		}
		i++
	}
	return i
}

// jsonStrPlain[c] is true for bytes that can appear in a JSON string as they
// are: everything except the quote, the backslash and control characters.
var jsonStrPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanJSONString validates the string whose opening quote is data[i]. It
// returns the index just past the closing quote and whether the contents
// hold any escape sequence.
func scanJSONString(data []byte, i int) (end int, esc, ok bool) {
	i++ // opening quote
	for {
		i = skipJSONPlain(data, i)
		if i >= len(data) {
			return 0, false, false
		}
		switch data[i] {
		case '"':
			return i + 1, esc, true
		case '\\':
			esc = true
			if i+1 >= len(data) {
				return 0, false, false
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if _, ok := hex4(data, i+2); !ok {
					return 0, false, false
				}
				i += 6
			default:
				return 0, false, false
			}
		default: // control character
			return 0, false, false
		}
	}
}

// skipJSONPlain returns the index of the first byte at or after i that is not plain in a JSON
// string (jsonStrPlain: a quote, a backslash or a control character), or len(data). It tests eight
// bytes at a time (jsonSpecialBytes), so that the long strings of real events cost a fraction of
// a byte-by-byte scan, and the last few bytes one at a time.
func skipJSONPlain(data []byte, i int) int {
	for ; len(data)-i >= 8; i += 8 {
		if m := jsonSpecialBytes(binary.LittleEndian.Uint64(data[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for i < len(data) && jsonStrPlain[data[i]] {
		i++
	}
	return i
}

// jsonSpecialBytes returns a mask of w, eight bytes of a string in little-endian order, whose
// lowest set bit is the top bit of w's first byte that is not plain (a quote, a backslash or a
// byte below 0x20), or 0 when all eight are plain. Top bits of later bytes may be set too, and the
// caller ignores them: a byte's subtraction borrows from the next byte only when it is itself
// below the value subtracted, so no byte before the first special one is flagged. Bytes of 0x80
// and above are plain and never flagged (the &^ w).
func jsonSpecialBytes(w uint64) uint64 {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	q, b := w^('"'*ones), w^('\\'*ones)
	return ((q - ones) | (b - ones) | (w - 0x20*ones)) &^ w & tops
}

// hex4 decodes the four hex digits at data[i:i+4].
func hex4(data []byte, i int) (rune, bool) {
	if i < 0 || len(data)-i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// nextJSONChar decodes one element of the contents of a string already
// validated by scanJSONString, starting at s[i]: either a single byte copied
// as it is, or one escape sequence (a surrogate pair counts as one). It
// stores the UTF-8 bytes in buf and returns how many it stored and the index
// of the next element.
//
// Escapes decode as encoding/json decodes them: a \u escape naming a lone or
// misordered UTF-16 surrogate becomes U+FFFD, and a following \u escape is
// then decoded on its own.
func nextJSONChar(s []byte, i int, buf *[utf8.UTFMax]byte) (n, next int) {
	if s[i] != '\\' {
		buf[0] = s[i]
		return 1, i + 1
	}
	var c byte
	switch s[i+1] {
	case 'u':
		r, _ := hex4(s, i+2)
		next = i + 6
		if 0xD800 <= r && r < 0xE000 {
			if r2, ok := lowSurrogateAt(s, next); ok && r < 0xDC00 {
				r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
				next += 6
			} else {
				r = utf8.RuneError
			}
		}
		return utf8.EncodeRune(buf[:], r), next
	case 'b':
		c = '\b'
	case 'f':
		c = '\f'
	case 'n':
		c = '\n'
	case 'r':
		c = '\r'
	case 't':
		c = '\t'
	default: // '"', '\\', '/'
		c = s[i+1]
	}
	buf[0] = c
	return 1, i + 2
}

// lowSurrogateAt reports whether s[i:] starts with a \u escape naming a low
// surrogate, and returns it.
func lowSurrogateAt(s []byte, i int) (rune, bool) {
	if len(s)-i < 6 || s[i] != '\\' || s[i+1] != 'u' {
		return 0, false
	}
	r, ok := hex4(s, i+2)
	return r, ok && 0xDC00 <= r && r < 0xE000
}

// unescapeJSONString decodes the contents of a validated string that holds
// escapes into a new slice. Decoding never grows the contents, so one
// allocation of len(s) bytes suffices.
func unescapeJSONString(s []byte) []byte {
	out := make([]byte, 0, len(s))
	var buf [utf8.UTFMax]byte
	for i := 0; i < len(s); {
		j := bytes.IndexByte(s[i:], '\\')
		if j < 0 {
			return append(out, s[i:]...)
		}
		out = append(out, s[i:i+j]...)
		n, next := nextJSONChar(s, i+j, &buf)
		out = append(out, buf[:n]...)
		i = next
	}
	return out
}

// jsonStringEqual reports whether the contents s of a validated string, with
// its escapes decoded, equal want. It does not allocate.
func jsonStringEqual(s []byte, esc bool, want string) bool {
	if !esc {
		return string(s) == want
	}
	var buf [utf8.UTFMax]byte
	w := 0
	for i := 0; i < len(s); {
		n, next := nextJSONChar(s, i, &buf)
		if len(want)-w < n || string(buf[:n]) != want[w:w+n] {
			return false
		}
		w += n
		i = next
	}
	return w == len(want)
}

// scanJSONLiteral checks that data[i:] starts with lit and returns the index
// just past it.
func scanJSONLiteral(data []byte, i int, lit string) (int, bool) {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// scanJSONNumber validates the number starting at data[i] against the JSON
// grammar -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? and returns the
// index just past it. It does not look at the byte after the number.
func scanJSONNumber(data []byte, i int) (int, bool) {
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i >= len(data):
		return 0, false
	case data[i] == '0':
		i++
	case '1' <= data[i] && data[i] <= '9':
		i, _ = jsonDigits(data, i)
	default:
		return 0, false
	}
	var ok bool
	if i < len(data) && data[i] == '.' {
		if i, ok = jsonDigits(data, i+1); !ok {
			return 0, false
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i, ok = jsonDigits(data, i); !ok {
			return 0, false
		}
	}
	return i, true
}

// skipJSONValue validates the value starting at data[i], whose enclosing
// containers put it at the given depth, and returns the index just past it.
// It is iterative: nested containers are tracked in a fixed bit stack, and
// nesting beyond maxJSONDepth fails.
func skipJSONValue(data []byte, i, depth int) (int, bool) {
	var (
		isObj [maxJSONDepth/64 + 1]uint64 // bit n: container n of this skip is an object
		n     int                         // containers open in this skip
		ok    bool
	)
	for {
		// A value starts at data[i].
		if i >= len(data) {
			return 0, false
		}
		switch c := data[i]; {
		case c == '{' || c == '[':
			if depth+n+1 > maxJSONDepth {
				return 0, false
			}
			if c == '{' {
				isObj[n/64] |= 1 << (n % 64)
			} else {
				isObj[n/64] &^= 1 << (n % 64)
			}
			n++
			i = skipJSONSpace(data, i+1)
			if i < len(data) && data[i] == c+2 { // '{'+2 == '}', '['+2 == ']'
				n--
				i++
				break // empty container: a complete value
			}
			if c == '{' {
				if i, ok = skipJSONMemberName(data, i); !ok {
					return 0, false
				}
			}
			continue // the container's first element
		case c == '"':
			if i, _, ok = scanJSONString(data, i); !ok {
				return 0, false
			}
		case c == 't':
			if i, ok = scanJSONLiteral(data, i, "true"); !ok {
				return 0, false
			}
		case c == 'f':
			if i, ok = scanJSONLiteral(data, i, "false"); !ok {
				return 0, false
			}
		case c == 'n':
			if i, ok = scanJSONLiteral(data, i, "null"); !ok {
				return 0, false
			}
		default:
			if i, ok = scanJSONNumber(data, i); !ok {
				return 0, false
			}
		}
		// A complete value ends just before data[i]: close containers until
		// one continues with another element.
		for {
			if n == 0 {
				return i, true
			}
			i = skipJSONSpace(data, i)
			if i >= len(data) {
				return 0, false
			}
			obj := isObj[(n-1)/64]&(1<<((n-1)%64)) != 0
			if data[i] == ',' {
				i = skipJSONSpace(data, i+1)
				if obj {
					if i, ok = skipJSONMemberName(data, i); !ok {
						return 0, false
					}
				}
				break
			}
			if (obj && data[i] == '}') || (!obj && data[i] == ']') {
				n--
				i++
				continue
			}
			return 0, false
		}
	}
}

// skipJSONMemberName validates the `"name":` that starts an object member at
// data[i] and returns the index of the member's value.
func skipJSONMemberName(data []byte, i int) (int, bool) {
	if i >= len(data) || data[i] != '"' {
		return 0, false
	}
	end, _, ok := scanJSONString(data, i)
	if !ok {
		return 0, false
	}
	i = skipJSONSpace(data, end)
	if i >= len(data) || data[i] != ':' {
		return 0, false
	}
	return skipJSONSpace(data, i+1), true
}

// jsonDigits returns the index just past the run of decimal digits starting
// at data[i] and whether the run is non-empty.
func jsonDigits(data []byte, i int) (int, bool) {
	start := i
	for i < len(data) && '0' <= data[i] && data[i] <= '9' {
		i++
	}
	return i, i > start
}
