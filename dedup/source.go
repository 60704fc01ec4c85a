package dedup

import (
	"bytes"
	"fmt"
	"strings"
)

// SourceSpec says where a record's source is read, for the per-source metrics (the
// DEDUP_METRICS_SOURCE setting): the producer, tenant or library that sent it. It has the forms of
// a KeySpec plus one: the Kafka key up to a separator.
//
// A SourceSpec is treated as immutable and may be used by many goroutines at once, like a KeySpec.
type SourceSpec struct {
	// Key is where the source is read when Prefix is empty.
	Key KeySpec
	// Prefix, when not empty, makes the source the Kafka key up to the first occurrence of
	// Prefix (spelled "key-prefix:SEP"); Key is then ignored.
	Prefix string
}

// ParseSourceSpec parses the textual form of a SourceSpec: everything ParseKeySpec accepts
// ("key", "value", "header:NAME", "json:PATH"), or "key-prefix:SEP", the Kafka key up to the first
// SEP (SEP is taken as it is and may be several bytes long). It returns an error prefixed "dedup: "
// for an empty or unknown spec, or an empty SEP.
func ParseSourceSpec(s string) (SourceSpec, error) {
	if sep, ok := strings.CutPrefix(s, "key-prefix:"); ok {
		if sep == "" {
			return SourceSpec{}, fmt.Errorf(`dedup: source spec %q: empty separator (want "key-prefix:SEP", such as "key-prefix::")`, s)
		}
		return SourceSpec{Prefix: sep}, nil
	}
	if s == "key-prefix" {
		return SourceSpec{}, fmt.Errorf(`dedup: source spec %q: missing separator (want "key-prefix:SEP")`, s)
	}
	ks, err := ParseKeySpec(s)
	if err != nil {
		return SourceSpec{}, fmt.Errorf("%w (or key-prefix:SEP for a source)", err)
	}
	return SourceSpec{Key: ks}, nil
}

// String returns the textual form of s; ParseSourceSpec(s.String()) returns s for every s that
// ParseSourceSpec returned.
func (s SourceSpec) String() string {
	if s.Prefix != "" {
		return "key-prefix:" + s.Prefix
	}
	return s.Key.String()
}

// Extract returns the source of the record with the given key, value and headers, with the
// conventions of KeySpec.Extract (headers may be nil; the result aliases the record's bytes). Under
// key-prefix:SEP the source is the key up to the first SEP; a key without SEP, or starting with
// it, has no source (ok is false), as has a record for which KeySpec.Extract finds none. A source
// is never empty when ok is true. Extract allocates nothing for key-prefix, key, value and header
// specs, and is safe for concurrent use.
func (s SourceSpec) Extract(key, value []byte, headers func(yield func(name string, value []byte) bool)) (src []byte, ok bool) {
	if s.Prefix == "" {
		return s.Key.Extract(key, value, headers)
	}
	i := bytes.Index(key, []byte(s.Prefix))
	if i <= 0 {
		return nil, false
	}
	return key[:i], true
}
