package identity

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Kind says which part of a Kafka record a Spec reads, and how. The zero value is KindKey.
type Kind uint8

const (
	// KindKey identifies a record by its Kafka key. Spelled "key".
	KindKey Kind = iota
	// KindValue identifies a record by its whole value. Spelled "value".
	KindValue
	// KindHeader identifies a record by the value of one of its headers. Spelled "header:NAME".
	KindHeader
	// KindJSON identifies a record by one field of its value, read as a JSON object. Spelled
	// "json:PATH", for example "json:meta.id".
	KindJSON
	// KindAvro identifies a record by one field of its value (or key), an Avro record in
	// Confluent's wire format whose schema is read from a schema registry. Spelled "avro:PATH"
	// or "avro-key:PATH".
	KindAvro
	// KindProtobuf identifies a record by one field of its value (or key), a Protobuf message in
	// Confluent's wire format whose schema is read from a schema registry. Spelled
	// "protobuf:PATH" or "protobuf-key:PATH".
	KindProtobuf
	// KindKeyPrefix is the Kafka key up to the first occurrence of a separator, spelled
	// "key-prefix:SEP". Only a source spec (ParseSource) takes it.
	KindKeyPrefix
)

// String returns the kind's name as it is spelled in a spec ("key", "value", "header", "json",
// "avro", "protobuf", "key-prefix"), or "Kind(N)" for an unknown kind.
func (k Kind) String() string {
	switch k {
	case KindKey:
		return "key"
	case KindValue:
		return "value"
	case KindHeader:
		return "header"
	case KindJSON:
		return "json"
	case KindAvro:
		return "avro"
	case KindProtobuf:
		return "protobuf"
	case KindKeyPrefix:
		return "key-prefix"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Schemas reports whether the kind reads a schema registry.
func (k Kind) Schemas() bool { return k == KindAvro || k == KindProtobuf }

// Spec says what identifies a record: the DEDUP_KEY setting, or where DEDUP_METRICS_SOURCE reads
// a record's source. Its zero value means "the Kafka key".
//
// Name is the header name for KindHeader and the separator for KindKeyPrefix, and is ignored
// otherwise. Path is the list of field names leading to the identity for KindJSON, KindAvro and
// KindProtobuf and is ignored otherwise; each element is matched literally, so a hand-built Path
// may name JSON members that contain dots, though such a spec does not survive String and Parse.
// FromKey makes KindAvro and KindProtobuf read the Kafka key instead of the value.
//
// A Spec is treated as immutable: an Extractor only reads it, so one Spec may be shared by many
// goroutines as long as nobody modifies its Path.
type Spec struct {
	Kind    Kind
	Name    string   // header name (KindHeader) or separator (KindKeyPrefix)
	Path    []string // field names (KindJSON, KindAvro, KindProtobuf)
	FromKey bool     // KindAvro, KindProtobuf: read the Kafka key, not the value
}

// specForms lists the accepted spellings, for error messages.
const specForms = `want "key", "value", "header:NAME", "json:PATH", "avro:PATH", "avro-key:PATH", "protobuf:PATH" or "protobuf-key:PATH"`

// Parse parses the textual form of a Spec, as found in the DEDUP_KEY setting:
//
//	key                 the Kafka key
//	value               the whole record value
//	header:NAME         the value of the first header named exactly NAME
//	json:PATH           a field of the JSON object value; PATH is a list of member names
//	                    separated by dots, such as meta.id
//	avro:PATH           a field of the Avro record value (Confluent wire format), such as meta.id
//	avro-key:PATH       the same in the Kafka key
//	protobuf:PATH       a field of the Protobuf message value (Confluent wire format)
//	protobuf-key:PATH   the same in the Kafka key
//
// Kind names are lower case; NAME is everything after the first colon, taken as it is (it may
// contain colons and spaces). JSON path elements cannot contain dots, and array elements cannot
// be addressed. Avro and Protobuf path elements are field names: a letter or underscore followed
// by letters, digits and underscores. Parse returns an error prefixed "identity: " and the zero
// Spec for an empty string, an unknown kind, an argument given to key or value, an empty header
// name, or a path element that is empty or not a field name.
func Parse(s string) (Spec, error) {
	kind, arg, hasArg := strings.Cut(s, ":")
	fail := func(msg string) (Spec, error) {
		return Spec{}, fmt.Errorf("identity: key spec %q: %s", s, msg)
	}
	switch kind {
	case "":
		if s == "" {
			return Spec{}, errors.New("identity: empty key spec (" + specForms + ")")
		}
		return fail("missing kind (" + specForms + ")")
	case "key", "value":
		if hasArg {
			return fail(fmt.Sprintf("kind %q takes no argument (%s)", kind, specForms))
		}
		if kind == "key" {
			return Spec{Kind: KindKey}, nil
		}
		return Spec{Kind: KindValue}, nil
	case "header":
		if arg == "" {
			return fail(`empty header name (want "header:NAME")`)
		}
		return Spec{Kind: KindHeader, Name: arg}, nil
	case "json", "avro", "avro-key", "protobuf", "protobuf-key":
		return parsePath(kind, arg, fail)
	}
	return fail(fmt.Sprintf("unknown kind %q (%s)", kind, specForms))
}

// parsePath parses the PATH of the json, avro and protobuf forms.
func parsePath(kind, arg string, fail func(string) (Spec, error)) (Spec, error) {
	base, fromKey := strings.CutSuffix(kind, "-key")
	sp := Spec{Kind: KindJSON, FromKey: fromKey}
	what := "JSON"
	switch base {
	case "avro":
		sp.Kind, what = KindAvro, "Avro"
	case "protobuf":
		sp.Kind, what = KindProtobuf, "Protobuf"
	}
	if arg == "" {
		return fail(fmt.Sprintf(`empty %s path (want "%s:PATH", such as "%s:meta.id")`, what, kind, kind))
	}
	sp.Path = strings.Split(arg, ".")
	for i, seg := range sp.Path {
		if seg == "" {
			return fail(fmt.Sprintf("%s path element %d of %d is empty (elements are separated by single dots)", what, i+1, len(sp.Path)))
		}
		if sp.Kind != KindJSON && !fieldName(seg) {
			return fail(fmt.Sprintf("%s path element %q is not a field name (a letter or _ followed by letters, digits and _)", what, seg))
		}
	}
	return sp, nil
}

// fieldName reports whether s is an Avro or Protobuf field name: [A-Za-z_][A-Za-z0-9_]*.
func fieldName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

// String returns the textual form of s. For every Spec returned by Parse or ParseSource,
// parsing s.String() again returns an equal Spec. For a Spec with an unknown Kind it returns a
// string Parse rejects.
func (s Spec) String() string {
	switch s.Kind {
	case KindKey, KindValue:
		return s.Kind.String()
	case KindHeader, KindKeyPrefix:
		return s.Kind.String() + ":" + s.Name
	case KindJSON, KindAvro, KindProtobuf:
		k := s.Kind.String()
		if s.FromKey && s.Kind != KindJSON {
			k += "-key"
		}
		return k + ":" + strings.Join(s.Path, ".")
	}
	return s.Kind.String()
}

// ParseSource parses the textual form of a source spec (the DEDUP_METRICS_SOURCE setting, where a
// record's source is read for the per-source metrics: the producer, tenant or library that sent
// it): everything Parse accepts, or "key-prefix:SEP", the Kafka key up to the first SEP (SEP is
// taken as it is and may be several bytes long). It returns an error prefixed "identity: " for an
// empty or unknown spec, or an empty SEP.
func ParseSource(s string) (Spec, error) {
	if sep, ok := strings.CutPrefix(s, "key-prefix:"); ok {
		if sep == "" {
			return Spec{}, fmt.Errorf(`identity: source spec %q: empty separator (want "key-prefix:SEP", such as "key-prefix::")`, s)
		}
		return Spec{Kind: KindKeyPrefix, Name: sep}, nil
	}
	if s == "key-prefix" {
		return Spec{}, fmt.Errorf(`identity: source spec %q: missing separator (want "key-prefix:SEP")`, s)
	}
	sp, err := Parse(s)
	if err != nil {
		return Spec{}, fmt.Errorf("%w (or key-prefix:SEP for a source)", err)
	}
	return sp, nil
}
