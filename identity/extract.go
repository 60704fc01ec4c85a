package identity

import (
	"bytes"
	"context"
	"errors"
	"sync"
)

// Headers iterates over a record's headers in order, like an iter.Seq2 of name and value. An
// Extractor calls it at most once per record, stops it after the first match, and expects it not
// to keep yield after returning. It may be nil when the record has none.
type Headers = func(yield func(name string, value []byte) bool)

// Reason says why a record has no identity. The zero value, Found, means it has one. The set of
// reasons is fixed (Reasons lists them), so it may label a metric.
type Reason uint8

const (
	// Found: the record has an identity.
	Found Reason = iota
	// Missing: the key, value, header or field is absent, null or empty.
	Missing
	// Malformed: the value cannot be read as the spec says (malformed JSON, a truncated Avro or
	// Protobuf body).
	Malformed
	// NotWireFormat: an Avro or Protobuf value does not start with Confluent's wire format
	// header (magic byte 0 and a schema id).
	NotWireFormat
	// UnknownSchema: the schema registry does not know the record's schema id (404), or the
	// schema it returned cannot be parsed.
	UnknownSchema
	// NotInSchema: the path does not exist in the record's schema, or leads to a value that is
	// not a scalar (a record, message, array or map).
	NotInSchema
	numReasons
)

// NumReasons is the number of Reason values, Found included: a valid Reason indexes an array of
// this length.
const NumReasons = int(numReasons)

var reasonNames = [numReasons]string{"found", "missing", "malformed", "not_wire_format", "unknown_schema", "not_in_schema"}

// String returns the reason's metric label: "found", "missing", "malformed", "not_wire_format",
// "unknown_schema" or "not_in_schema"; "unknown" for a value outside the set.
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Reasons returns the labels of the reasons a record can have no identity for (every Reason but
// Found), in order. The caller may modify the returned slice.
func Reasons() []string {
	return append([]string(nil), reasonNames[1:]...)
}

// ErrRetry marks an error after which the extraction may succeed if tried again: the schema
// registry is down, timed out or answered 5xx. Every error an Extractor returns wraps it; the
// caller holds the record (and those after it) and retries, and must not treat it as unkeyed.
var ErrRetry = errors.New("identity: temporary failure")

// Func is the shape of Extractor.Extract: the record's identity (absent == Found), or the
// reason it has none, or a retry error (wrapping ErrRetry).
type Func func(ctx context.Context, key, value []byte, headers Headers) (id []byte, absent Reason, err error)

// Extractor extracts the identity (or source) of records following a Spec. Create it with New. It
// is safe for concurrent use; for Avro and Protobuf specs it caches every schema it fetched from
// the registry for the life of the process.
type Extractor struct {
	spec    Spec
	schemas *schemaCache // nil unless spec.Kind.Schemas()
}

// Options configures New.
type Options struct {
	// Registry serves the schemas of Avro and Protobuf specs; required for them, ignored for the
	// others.
	Registry Registry
}

// New returns an Extractor for spec. It returns an error prefixed "identity: " for a spec of an
// unknown kind, a JSON, Avro or Protobuf spec without a path, or an Avro or Protobuf spec without
// a Registry. It contacts no registry: see Extractor.Check.
func New(spec Spec, opts Options) (*Extractor, error) {
	switch spec.Kind {
	case KindKey, KindValue:
	case KindHeader, KindKeyPrefix:
		if spec.Name == "" {
			return nil, errors.New("identity: " + spec.Kind.String() + " spec without a name")
		}
	case KindJSON, KindAvro, KindProtobuf:
		if len(spec.Path) == 0 {
			return nil, errors.New("identity: " + spec.Kind.String() + " spec without a path")
		}
	default:
		return nil, errors.New("identity: unknown spec kind " + spec.Kind.String())
	}
	e := &Extractor{spec: spec}
	if spec.Kind.Schemas() {
		if opts.Registry == nil {
			return nil, errors.New("identity: " + spec.String() + " needs a schema registry (SCHEMA_REGISTRY_URL)")
		}
		e.schemas = newSchemaCache(spec, opts.Registry)
	}
	return e, nil
}

// Spec returns the spec e follows.
func (e *Extractor) Spec() Spec { return e.spec }

// Check verifies that e can work: for an Avro or Protobuf spec, that the registry answers (see
// Registry.Check). It returns nil for the other kinds.
func (e *Extractor) Check(ctx context.Context) error {
	if e.schemas == nil {
		return nil
	}
	return e.schemas.reg.Check(ctx)
}

// Extract returns the identity of the record with the given Kafka key, value and headers. It
// returns exactly one of: an identity that is never empty (absent == Found, err == nil); the
// reason the record has none (id == nil, err == nil), which is permanent for that record; or an
// error wrapping ErrRetry (the registry could not be asked; id == nil), after which the caller
// tries again. ctx bounds a registry request; other kinds ignore it.
//
// What it reads:
//   - KindKey, KindValue: the key or value; Missing when nil or empty.
//   - KindHeader: the first header named exactly Spec.Name; Missing when there is none or its
//     value is empty.
//   - KindKeyPrefix: the key up to the first Spec.Name; Missing when the key has no separator or
//     starts with it.
//   - KindJSON: the value is scanned as a stream, never decoded into a tree, and only as far as the
//     end of the target, so malformed bytes after it go unnoticed. Within an object the first
//     member with a given name wins. A string target yields its contents with escapes decoded, so
//     "a\u0062" and "ab" are the same identity; a number, true or false yields the literal as
//     written (1 and 1.0 differ); an object or array yields its raw bytes. Missing for a
//     missing member, null or the empty string; Malformed when the value is not a JSON object, the
//     JSON read on the way is malformed, a non-object stands on the path, or it nests deeper than
//     1024 levels.
//   - KindAvro, KindProtobuf: see the package documentation.
//
// The returned id usually aliases key, value or a header value, and is only valid as long as
// they are; copy it to keep it. It is a new slice only for a JSON string containing escapes.
// Extract allocates nothing else once the record's schema is cached, and never panics on any
// input.
func (e *Extractor) Extract(ctx context.Context, key, value []byte, headers Headers) (id []byte, absent Reason, err error) {
	switch e.spec.Kind {
	case KindKey:
		id = key
	case KindValue:
		id = value
	case KindHeader:
		id = headerValue(headers, e.spec.Name)
	case KindKeyPrefix:
		if i := bytes.Index(key, []byte(e.spec.Name)); i > 0 {
			id = key[:i]
		}
	case KindJSON:
		var ok bool
		if id, ok = jsonPath(value, e.spec.Path); !ok && !jsonObjectStart(value) {
			return nil, Malformed, nil
		}
	case KindAvro, KindProtobuf:
		data := value
		if e.spec.FromKey {
			data = key
		}
		return e.schemas.extract(ctx, data)
	}
	if len(id) == 0 {
		return nil, Missing, nil
	}
	return id, Found, nil
}

// jsonObjectStart reports whether data starts, after white space, with '{'.
func jsonObjectStart(data []byte) bool {
	i := skipJSONSpace(data, 0)
	return i < len(data) && data[i] == '{'
}

// headerFinder holds the state of one header lookup. Its yield field is the method value of
// visit, built once per finder, so that a lookup can hand a callback to the caller's iterator
// without allocating a closure each time.
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
func headerValue(headers Headers, name string) []byte {
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
