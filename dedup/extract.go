package dedup

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// KeyKind says which part of a Kafka record a KeySpec reads. The zero value
// is KeyKafka.
type KeyKind uint8

const (
	// KeyKafka identifies a record by its Kafka key. Spelled "key".
	KeyKafka KeyKind = iota
	// KeyValue identifies a record by its whole value. Spelled "value".
	KeyValue
	// KeyHeader identifies a record by the value of one of its headers.
	// Spelled "header:NAME".
	KeyHeader
	// KeyJSON identifies a record by one field of its value, read as a JSON
	// object. Spelled "json:PATH", for example "json:meta.id".
	KeyJSON
)

// String returns the kind's name as it is spelled in a key spec ("key",
// "value", "header" or "json"), or "KeyKind(N)" for an unknown kind.
func (k KeyKind) String() string {
	switch k {
	case KeyKafka:
		return "key"
	case KeyValue:
		return "value"
	case KeyHeader:
		return "header"
	case KeyJSON:
		return "json"
	}
	return "KeyKind(" + strconv.Itoa(int(k)) + ")"
}

// KeySpec says what identifies a record for deduplication. Its zero value
// means "the Kafka key".
//
// Name is the header name for KeyHeader and is ignored otherwise. Path is the
// list of object member names leading to the identity for KeyJSON and is
// ignored otherwise; each element is matched literally, so a hand-built Path
// may name members that contain dots, though such a spec does not survive
// String and ParseKeySpec.
//
// A KeySpec is treated as immutable: Extract only reads it, so one KeySpec may
// be used by many goroutines at once as long as nobody modifies its Path.
type KeySpec struct {
	Kind KeyKind
	Name string   // header name, for KeyHeader
	Path []string // object member names, for KeyJSON
}

// keySpecForms lists the accepted spellings, for error messages.
const keySpecForms = `want "key", "value", "header:NAME" or "json:PATH"`

// ParseKeySpec parses the textual form of a KeySpec, as found in the
// DEDUP_KEY setting:
//
//	key            the Kafka key
//	value          the whole record value
//	header:NAME    the value of the first header named exactly NAME
//	json:PATH      a field of the JSON object value; PATH is a list of
//	               member names separated by dots, such as meta.id
//
// Kind names are lower case; NAME is everything after the first colon,
// taken as it is (it may contain colons and spaces). PATH elements cannot
// contain dots, and array elements cannot be addressed. ParseKeySpec returns
// an error prefixed "dedup: " and the zero KeySpec for an empty string, an
// unknown kind, an argument given to key or value, an empty header name, or
// an empty path element.
func ParseKeySpec(s string) (KeySpec, error) {
	kind, arg, hasArg := strings.Cut(s, ":")
	fail := func(msg string) (KeySpec, error) {
		return KeySpec{}, fmt.Errorf("dedup: key spec %q: %s", s, msg)
	}
	switch kind {
	case "":
		if s == "" {
			return KeySpec{}, errors.New("dedup: empty key spec (" + keySpecForms + ")")
		}
		return fail("missing kind (" + keySpecForms + ")")
	case "key", "value":
		if hasArg {
			return fail(fmt.Sprintf("kind %q takes no argument (%s)", kind, keySpecForms))
		}
		if kind == "key" {
			return KeySpec{Kind: KeyKafka}, nil
		}
		return KeySpec{Kind: KeyValue}, nil
	case "header":
		if arg == "" {
			return fail(`empty header name (want "header:NAME")`)
		}
		return KeySpec{Kind: KeyHeader, Name: arg}, nil
	case "json":
		if arg == "" {
			return fail(`empty JSON path (want "json:PATH", such as "json:meta.id")`)
		}
		path := strings.Split(arg, ".")
		for i, seg := range path {
			if seg == "" {
				return fail(fmt.Sprintf("JSON path element %d of %d is empty (elements are separated by single dots)", i+1, len(path)))
			}
		}
		return KeySpec{Kind: KeyJSON, Path: path}, nil
	}
	return fail(fmt.Sprintf("unknown kind %q (%s)", kind, keySpecForms))
}

// String returns the textual form of s. For every KeySpec returned by
// ParseKeySpec, ParseKeySpec(s.String()) returns an equal KeySpec. For a
// KeySpec with an unknown Kind it returns a string ParseKeySpec rejects.
func (s KeySpec) String() string {
	switch s.Kind {
	case KeyKafka, KeyValue:
		return s.Kind.String()
	case KeyHeader:
		return "header:" + s.Name
	case KeyJSON:
		return "json:" + strings.Join(s.Path, ".")
	}
	return s.Kind.String()
}

// Extract returns the identity of the record with the given Kafka key, value
// and headers, following s. headers iterates over the record's headers in
// order, like an iter.Seq2; it may be nil when the record has none. Extract
// calls it at most once, stops it after the first match, and expects it not
// to keep yield after returning.
//
// It reports ok == false when the record has no identity under s: for
// KeyKafka when the key is nil or empty; for KeyValue when the value is nil
// (a tombstone) or empty; for KeyHeader when no header has exactly the name
// s.Name, or the first one that does has an empty value; for KeyJSON when
// the value is not a JSON object, the path leads to a missing member, a
// non-object on the way, null or the empty string, the JSON read on the way
// is malformed, or it nests deeper than 1024 levels; and for an unknown
// Kind or a KeyJSON spec with an empty Path. An identity is never empty when
// ok is true.
//
// For KeyJSON the value is scanned as a stream, never decoded into a tree,
// and only as far as the end of the target, so malformed bytes after it go
// unnoticed. Within an object the first member with a given name wins. A
// string target yields its contents with escapes decoded, so "a\u0062" and
// "ab" are the same identity; a number, true or false yields the literal as
// written (1 and 1.0 differ); an object or array yields its raw bytes, so
// whitespace and member order inside it are part of the identity.
//
// The returned id usually aliases key, value or a header value, and is only
// valid as long as they are; copy it to keep it. It is a new slice only for
// a JSON string containing escapes. Extract allocates nothing except that
// slice, never panics on any input, and is safe for concurrent use.
func (s KeySpec) Extract(key, value []byte, headers func(yield func(name string, value []byte) bool)) (id []byte, ok bool) {
	switch s.Kind {
	case KeyKafka:
		id = key
	case KeyValue:
		id = value
	case KeyHeader:
		id = headerValue(headers, s.Name)
	case KeyJSON:
		id, _ = jsonPath(value, s.Path)
	}
	if len(id) == 0 {
		return nil, false
	}
	return id, true
}

// headerFinder holds the state of one header lookup. Its yield field is the
// method value of visit, built once per finder, so that a lookup can hand a
// callback to the caller's iterator without allocating a closure each time.
type headerFinder struct {
	name  string
	found bool
	value []byte
	yield func(name string, value []byte) bool
}

func (f *headerFinder) visit(name string, value []byte) bool {
	if f.found { // the iterator ignored our earlier false
		return false
	}
	if name == f.name {
		f.found, f.value = true, value
		return false
	}
	return true
}

var headerFinders = sync.Pool{New: func() any {
	f := new(headerFinder)
	f.yield = f.visit
	return f
}}

// headerValue returns the value of the first header named name, or nil.
func headerValue(headers func(yield func(name string, value []byte) bool), name string) []byte {
	if headers == nil {
		return nil
	}
	f := headerFinders.Get().(*headerFinder)
	f.name = name
	headers(f.yield)
	v := f.value
	*f = headerFinder{yield: f.yield} // drop references before pooling
	headerFinders.Put(f)
	return v
}
