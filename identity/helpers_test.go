package identity

import "context"

// Extract is the (id, ok) view of Extractor.Extract that the tests of the schema-free kinds use:
// it builds the Extractor on the stack, as New would for a valid spec, and ignores the reason.
func (s Spec) Extract(key, value []byte, headers Headers) ([]byte, bool) {
	e := Extractor{spec: s}
	id, absent, err := e.Extract(context.Background(), key, value, headers)
	return id, err == nil && absent == Found
}
