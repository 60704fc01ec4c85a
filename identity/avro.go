package identity

import (
	"fmt"
	"strings"

	"github.com/hamba/avro/v2"
)

// Avro identities. The schema is parsed with hamba/avro (the Avro specification's names,
// namespaces, references and validation are its business); the records are never decoded with
// it. compileAvro turns the schema and the path into a plan: at each record on the way, the types
// of the fields that precede the one on the path, to skip; at each union, one plan per branch.
// Extraction walks the plan over Avro's binary encoding, skipping without decoding and without
// allocating.

// avroKind is how a value of an Avro type is laid out in the binary encoding.
type avroKind uint8

const (
	avroNull   avroKind = iota // nothing
	avroBool                   // one byte
	avroVarint                 // int, long, enum: a zig-zag varint
	avroFloat                  // 4 bytes
	avroDouble                 // 8 bytes
	avroBytes                  // bytes, string: a long length, then the bytes
	avroFixed                  // size bytes
	avroArray                  // blocks of items (a negative count is followed by a byte size)
	avroMap                    // blocks of string keys and values
	avroUnion                  // a long branch index, then the branch
	avroRecord                 // the fields in order
)

// avroNode is the layout of one Avro type, for skipping. Nodes of recursive types point back to
// themselves.
type avroNode struct {
	kind     avroKind
	size     int         // avroFixed
	elem     *avroNode   // avroArray items, avroMap values
	branches []*avroNode // avroUnion
	fields   []*avroNode // avroRecord
	symbols  [][]byte    // enum symbols, for an enum target
}

// maxAvroDepth bounds the nesting of values skipped at once: only a recursive schema can nest
// deeper, and such a record is malformed for this reader.
const maxAvroDepth = 64

// avroPlan reaches the target field of one schema.
type avroPlan struct{ root *avroStep }

// avroStep is one record on the path: the fields before the path's, then the path's field.
type avroStep struct {
	skip   []*avroNode
	target avroTarget
}

// avroTarget is the type of the path's field at one level.
type avroTarget struct {
	node     *avroNode     // the scalar at the end of the path
	next     *avroStep     // a record the path goes on into
	branches []*avroTarget // a union: per branch, nil when the path does not go through it
}

// compileAvro parses schema s (with its references, parsed first) and compiles path into a plan.
// A path the schema does not have gives a *notInSchemaError.
func compileAvro(s Schema, path []string) (avroPlan, error) {
	cache := &avro.SchemaCache{}
	for _, r := range s.References {
		if _, err := avro.ParseWithCache(r.Schema.Text, "", cache); err != nil {
			return avroPlan{}, fmt.Errorf("identity: Avro reference %q: %w", r.Name, err)
		}
	}
	root, err := avro.ParseWithCache(s.Text, "", cache)
	if err != nil {
		return avroPlan{}, fmt.Errorf("identity: Avro schema: %w", err)
	}
	c := avroCompiler{nodes: map[string]*avroNode{}}
	rec, ok := deref(root).(*avro.RecordSchema)
	if !ok {
		return avroPlan{}, &notInSchemaError{fmt.Sprintf("Avro schema is a %s, not a record", root.Type())}
	}
	step, err := c.step(rec, path, path)
	return avroPlan{root: step}, err
}

// deref returns the schema a reference names, or s.
func deref(s avro.Schema) avro.Schema {
	if r, ok := s.(*avro.RefSchema); ok {
		return r.Schema()
	}
	return s
}

// avroCompiler builds the nodes of one schema, once per named type.
type avroCompiler struct {
	nodes map[string]*avroNode // by full name
}

// step compiles the part rest of path at record rec.
func (c *avroCompiler) step(rec *avro.RecordSchema, path, rest []string) (*avroStep, error) {
	st := &avroStep{}
	for _, f := range rec.Fields() {
		if f.Name() != rest[0] {
			st.skip = append(st.skip, c.node(f.Type()))
			continue
		}
		t, err := c.target(f.Type(), path, rest[1:])
		if err != nil {
			return nil, err
		}
		st.target = *t
		return st, nil
	}
	return nil, &notInSchemaError{fmt.Sprintf("Avro path %s: record %s has no field %q", strings.Join(path, "."), rec.FullName(), rest[0])}
}

// target compiles the field type s, with rest of path left after it.
func (c *avroCompiler) target(s avro.Schema, path, rest []string) (*avroTarget, error) {
	s = deref(s)
	switch s := s.(type) {
	case *avro.RecordSchema:
		if len(rest) == 0 {
			return nil, &notInSchemaError{fmt.Sprintf("Avro path %s leads to record %s, not to a scalar", strings.Join(path, "."), s.FullName())}
		}
		next, err := c.step(s, path, rest)
		if err != nil {
			return nil, err
		}
		return &avroTarget{next: next}, nil
	case *avro.UnionSchema:
		t := &avroTarget{branches: make([]*avroTarget, len(s.Types()))}
		var firstErr error
		found := false
		for i, b := range s.Types() {
			if deref(b).Type() == avro.Null {
				continue // null: absent
			}
			bt, err := c.target(b, path, rest)
			if err != nil {
				firstErr = cmpErr(firstErr, err)
				continue
			}
			t.branches[i], found = bt, true
		}
		if !found {
			if firstErr == nil {
				firstErr = &notInSchemaError{fmt.Sprintf("Avro path %s leads to a union of null only", strings.Join(path, "."))}
			}
			return nil, firstErr
		}
		return t, nil
	case *avro.ArraySchema, *avro.MapSchema:
		return nil, &notInSchemaError{fmt.Sprintf("Avro path %s leads to an %s, not to a scalar", strings.Join(path, "."), s.Type())}
	}
	if len(rest) > 0 {
		return nil, &notInSchemaError{fmt.Sprintf("Avro path %s: %s is a %s, not a record", strings.Join(path, "."), strings.Join(path[:len(path)-len(rest)], "."), s.Type())}
	}
	n := c.node(s)
	if n.kind == avroNull {
		return nil, &notInSchemaError{fmt.Sprintf("Avro path %s leads to null", strings.Join(path, "."))}
	}
	return &avroTarget{node: n}, nil
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// node returns the layout of s.
func (c *avroCompiler) node(s avro.Schema) *avroNode {
	s = deref(s)
	if named, ok := s.(avro.NamedSchema); ok {
		if n := c.nodes[named.FullName()]; n != nil {
			return n
		}
	}
	n := &avroNode{}
	switch s := s.(type) {
	case *avro.RecordSchema:
		c.nodes[s.FullName()] = n // before the fields: they may refer to it
		n.kind = avroRecord
		for _, f := range s.Fields() {
			n.fields = append(n.fields, c.node(f.Type()))
		}
	case *avro.EnumSchema:
		c.nodes[s.FullName()] = n
		n.kind = avroVarint
		for _, sym := range s.Symbols() {
			n.symbols = append(n.symbols, []byte(sym))
		}
	case *avro.FixedSchema:
		c.nodes[s.FullName()] = n
		n.kind, n.size = avroFixed, s.Size()
	case *avro.ArraySchema:
		n.kind, n.elem = avroArray, c.node(s.Items())
	case *avro.MapSchema:
		n.kind, n.elem = avroMap, c.node(s.Values())
	case *avro.UnionSchema:
		n.kind = avroUnion
		for _, b := range s.Types() {
			n.branches = append(n.branches, c.node(b))
		}
	default:
		n.kind = primitiveKind(s.Type())
	}
	return n
}

// primitiveKind returns the layout of a primitive type.
func primitiveKind(t avro.Type) avroKind {
	switch t {
	case avro.Boolean:
		return avroBool
	case avro.Int, avro.Long:
		return avroVarint
	case avro.Float:
		return avroFloat
	case avro.Double:
		return avroDouble
	case avro.String, avro.Bytes:
		return avroBytes
	}
	return avroNull
}

// extract returns the identity in the Avro body b.
func (p avroPlan) extract(b []byte) ([]byte, Reason, error) {
	id, r := p.root.extract(b, 0)
	if r == Found && len(id) == 0 {
		r = Missing
	}
	if r != Found {
		return nil, r, nil
	}
	return id, Found, nil
}

func (st *avroStep) extract(b []byte, pos int) ([]byte, Reason) {
	for _, n := range st.skip {
		var ok bool
		if pos, ok = skipAvro(b, pos, n, 0); !ok {
			return nil, Malformed
		}
	}
	return st.target.extract(b, pos)
}

func (t *avroTarget) extract(b []byte, pos int) ([]byte, Reason) {
	for t.branches != nil {
		i, next, ok := avroLong(b, pos)
		if !ok || i < 0 || i >= int64(len(t.branches)) {
			return nil, Malformed
		}
		if t = t.branches[i]; t == nil {
			return nil, Missing // null, or a branch the path does not go through
		}
		pos = next
	}
	if t.next != nil {
		return t.next.extract(b, pos)
	}
	return avroScalar(b, pos, t.node)
}

// avroScalar returns the canonical identity of the scalar of layout n at b[pos:]: the contents of
// a string, bytes or fixed; the symbol of an enum; the zig-zag varint of an int or long (so an int
// promoted to long keeps its identity); the bytes of a boolean, float or double.
func avroScalar(b []byte, pos int, n *avroNode) ([]byte, Reason) {
	switch n.kind {
	case avroBytes:
		l, next, ok := avroLong(b, pos)
		if !ok || l < 0 || l > int64(len(b)-next) {
			return nil, Malformed
		}
		return b[next : next+int(l)], Found
	case avroVarint:
		v, next, ok := avroLong(b, pos)
		if !ok {
			return nil, Malformed
		}
		if n.symbols != nil {
			if v < 0 || v >= int64(len(n.symbols)) {
				return nil, Malformed
			}
			return n.symbols[v], Found
		}
		return b[pos:next], Found
	}
	end, ok := skipAvro(b, pos, n, 0)
	if !ok {
		return nil, Malformed
	}
	return b[pos:end], Found
}

// avroLong reads the zig-zag varint at b[pos:] (at most 10 bytes).
func avroLong(b []byte, pos int) (v int64, next int, ok bool) {
	if pos < len(b) && b[pos] < 0x80 { // the common case: one byte
		u := uint64(b[pos])
		return int64(u>>1) ^ -int64(u&1), pos + 1, true
	}
	var u uint64
	for shift := uint(0); shift < 70; shift += 7 {
		if pos >= len(b) {
			return 0, 0, false
		}
		c := b[pos]
		pos++
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return int64(u>>1) ^ -int64(u&1), pos, true
		}
	}
	return 0, 0, false
}

// skipAvro returns the position just past the value of layout n at b[pos:]; ok is false when b
// ends first or the value is not valid Avro. depth counts the values being skipped around it.
func skipAvro(b []byte, pos int, n *avroNode, depth int) (int, bool) {
	if depth > maxAvroDepth {
		return 0, false
	}
	switch n.kind {
	case avroBytes: // first: strings are the most common fields
		l, next, ok := avroLong(b, pos)
		if !ok || l < 0 || l > int64(len(b)-next) {
			return 0, false
		}
		return next + int(l), true
	case avroNull:
		return pos, true
	case avroBool:
		return skipN(b, pos, 1)
	case avroVarint:
		_, next, ok := avroLong(b, pos)
		return next, ok
	case avroFloat:
		return skipN(b, pos, 4)
	case avroDouble:
		return skipN(b, pos, 8)
	case avroFixed:
		return skipN(b, pos, n.size)
	case avroUnion:
		i, next, ok := avroLong(b, pos)
		if !ok || i < 0 || i >= int64(len(n.branches)) {
			return 0, false
		}
		return skipAvro(b, next, n.branches[i], depth+1)
	case avroRecord:
		ok := true
		for _, f := range n.fields {
			if pos, ok = skipAvro(b, pos, f, depth+1); !ok {
				return 0, false
			}
		}
		return pos, true
	}
	return skipBlocks(b, pos, n, depth)
}

// skipBlocks skips the blocks of an array or map.
func skipBlocks(b []byte, pos int, n *avroNode, depth int) (int, bool) {
	for {
		count, next, ok := avroLong(b, pos)
		if !ok {
			return 0, false
		}
		pos = next
		if count == 0 {
			return pos, true
		}
		if count < 0 { // a block with its size in bytes: skip it whole
			size, next, ok := avroLong(b, pos)
			if !ok || size < 0 {
				return 0, false
			}
			if pos, ok = skipN(b, next, size); !ok {
				return 0, false
			}
			continue
		}
		if zeroSized(n) { // an array of nulls: nothing to skip, but bound the count
			if count > maxZeroItems {
				return 0, false
			}
			continue
		}
		if count > int64(len(b)-pos) { // every item takes a byte at least
			return 0, false
		}
		for range count {
			if n.kind == avroMap {
				if pos, ok = skipAvro(b, pos, &avroStringNode, depth+1); !ok {
					return 0, false
				}
			}
			if pos, ok = skipAvro(b, pos, n.elem, depth+1); !ok {
				return 0, false
			}
		}
	}
}

// maxZeroItems bounds the count of a block of an array of nulls, whose items take no bytes.
const maxZeroItems = 1 << 20

// zeroSized reports whether the items of an array may take no bytes (null items).
func zeroSized(n *avroNode) bool { return n.kind == avroArray && n.elem.kind == avroNull }

// avroStringNode is the layout of a map key.
var avroStringNode = avroNode{kind: avroBytes}

// skipN returns pos+n when b holds n more bytes.
func skipN[T int | int64](b []byte, pos int, n T) (int, bool) {
	if n < 0 || int64(n) > int64(len(b)-pos) {
		return 0, false
	}
	return pos + int(n), true
}
