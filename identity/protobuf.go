package identity

import (
	"fmt"
	"strings"
)

// Protobuf identities. compileProto parses the schema's .proto source (protoparse.go) and, for
// every message of the file, turns the path into the field numbers and wire types to follow; the
// record's message indexes choose the message. Extraction reads the Protobuf wire format, skipping
// the other fields by their wire type without decoding them and without allocating.

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireLen     = 2
	wireFixed32 = 5
)

// protoLevel is one field of the path: its number and the wire type its values have.
type protoLevel struct {
	number uint64
	wire   uint64
}

// protoMsgPlan is the plan of one message of the file, chosen by its message indexes.
type protoMsgPlan struct {
	indexes []int64
	levels  []protoLevel // nil when absent is set
	absent  Reason       // NotInSchema when the message lacks the path
}

// protoPlan reaches the target field in the messages of one schema.
type protoPlan struct {
	msgs []protoMsgPlan
}

// maxProtoIndexes bounds the message index list of a record: the nesting depth of its message.
const maxProtoIndexes = 32

// protoScalarWire maps the scalar types to their wire types.
var protoScalarWire = map[string]uint64{
	"double": wireFixed64, "fixed64": wireFixed64, "sfixed64": wireFixed64,
	"float": wireFixed32, "fixed32": wireFixed32, "sfixed32": wireFixed32,
	"int32": wireVarint, "int64": wireVarint, "uint32": wireVarint, "uint64": wireVarint,
	"sint32": wireVarint, "sint64": wireVarint, "bool": wireVarint,
	"string": wireLen, "bytes": wireLen,
}

// protoTypes indexes the messages and enums of a file and the files it imports.
type protoTypes struct {
	messages map[string]*protoMessage
	enums    map[string]bool
}

// compileProto parses schema s and its references and compiles path for every message of s. The
// plan of a message that lacks the path says so; a path no message has gives a
// *notInSchemaError.
func compileProto(s Schema, path []string) (protoPlan, error) {
	types := protoTypes{messages: map[string]*protoMessage{}, enums: map[string]bool{}}
	main, err := types.add(s, 0)
	if err != nil {
		return protoPlan{}, err
	}
	var plan protoPlan
	var firstErr error
	var walk func(ms []*protoMessage, prefix []int64)
	walk = func(ms []*protoMessage, prefix []int64) {
		for i, m := range ms {
			idx := append(append([]int64(nil), prefix...), int64(i))
			mp := protoMsgPlan{indexes: idx}
			if mp.levels, err = types.levels(m, path); err != nil {
				mp.absent, firstErr = NotInSchema, cmpErr(firstErr, err)
			}
			plan.msgs = append(plan.msgs, mp)
			walk(m.messages, idx)
		}
	}
	walk(main.messages, nil)
	for _, mp := range plan.msgs {
		if mp.absent == Found {
			return plan, nil
		}
	}
	if firstErr == nil {
		firstErr = &notInSchemaError{"the Protobuf schema declares no message"}
	}
	return plan, firstErr
}

// add parses s and, first, its references.
func (t protoTypes) add(s Schema, depth int) (*protoFile, error) {
	if depth > 32 {
		return nil, fmt.Errorf("identity: Protobuf references nest deeper than 32")
	}
	for _, r := range s.References {
		if _, err := t.add(r.Schema, depth+1); err != nil {
			return nil, fmt.Errorf("identity: Protobuf reference %q: %w", r.Name, err)
		}
	}
	f, err := parseProto(s.Text)
	if err != nil {
		return nil, err
	}
	var index func(ms []*protoMessage)
	index = func(ms []*protoMessage) {
		for _, m := range ms {
			t.messages[m.name] = m
			index(m.messages)
		}
	}
	index(f.messages)
	for e := range f.enums {
		t.enums[e] = true
	}
	return f, nil
}

// levels resolves path in message m.
func (t protoTypes) levels(m *protoMessage, path []string) ([]protoLevel, error) {
	var levels []protoLevel
	for depth, name := range path {
		f := m.field(name)
		where := strings.Join(path[:depth+1], ".")
		switch {
		case f == nil:
			return nil, &notInSchemaError{fmt.Sprintf("Protobuf path %s: message %s has no field %q", strings.Join(path, "."), m.name, name)}
		case f.repeated:
			return nil, &notInSchemaError{fmt.Sprintf("Protobuf path %s: %s is repeated", strings.Join(path, "."), where)}
		}
		last := depth == len(path)-1
		if w, ok := protoScalarWire[f.typ]; ok || t.enum(f.typ, m.name) {
			if !last {
				return nil, &notInSchemaError{fmt.Sprintf("Protobuf path %s: %s is a %s, not a message", strings.Join(path, "."), where, f.typ)}
			}
			return append(levels, protoLevel{number: f.number, wire: w}), nil // an enum is a varint (0)
		}
		sub := t.message(f.typ, m.name)
		switch {
		case sub == nil:
			return nil, &notInSchemaError{fmt.Sprintf("Protobuf path %s: type %s of %s is not in the schema", strings.Join(path, "."), f.typ, where)}
		case last:
			return nil, &notInSchemaError{fmt.Sprintf("Protobuf path %s leads to message %s, not to a scalar", strings.Join(path, "."), sub.name)}
		}
		levels = append(levels, protoLevel{number: f.number, wire: wireLen})
		m = sub
	}
	return levels, nil
}

// field returns m's field named name, or nil.
func (m *protoMessage) field(name string) *protoField {
	for i := range m.fields {
		if m.fields[i].name == name {
			return &m.fields[i]
		}
	}
	return nil
}

// resolve finds type name as seen from scope, following Protobuf's scoping: a leading dot is a
// full name; otherwise the innermost enclosing scope that has it wins.
func resolve[T any](name, scope string, in map[string]T) (T, bool) {
	if full, ok := strings.CutPrefix(name, "."); ok {
		v, ok := in[full]
		return v, ok
	}
	for {
		if v, ok := in[join(scope, name)]; ok {
			return v, true
		}
		if scope == "" {
			var zero T
			return zero, false
		}
		i := strings.LastIndexByte(scope, '.')
		if i < 0 {
			scope = ""
		} else {
			scope = scope[:i]
		}
	}
}

func (t protoTypes) message(name, scope string) *protoMessage {
	m, _ := resolve(name, scope, t.messages)
	return m
}

func (t protoTypes) enum(name, scope string) bool {
	_, ok := resolve(name, scope, t.enums)
	return ok
}

// extract returns the identity in the Protobuf body b: the message indexes, then the message.
func (p protoPlan) extract(b []byte) ([]byte, Reason, error) {
	var idx [maxProtoIndexes]int64
	n, pos, ok := protoIndexes(b, &idx)
	if !ok {
		return nil, Malformed, nil
	}
	mp := p.find(idx[:n])
	switch {
	case mp == nil:
		return nil, NotInSchema, nil // the schema has no such message
	case mp.absent != Found:
		return nil, mp.absent, nil
	}
	id, r := protoFind(b[pos:], mp.levels)
	if r == Found && len(id) == 0 {
		r = Missing
	}
	if r != Found {
		return nil, r, nil
	}
	return id, Found, nil
}

// protoIndexes reads Confluent's message index list at the start of b: a zig-zag varint count,
// then that many zig-zag varint indexes; a count of 0 means the list [0]. It returns the number
// of indexes stored in idx and the position after the list.
func protoIndexes(b []byte, idx *[maxProtoIndexes]int64) (n, pos int, ok bool) {
	count, pos, ok := avroLong(b, 0)
	switch {
	case !ok || count < 0 || count > maxProtoIndexes:
		return 0, 0, false
	case count == 0:
		idx[0] = 0
		return 1, pos, true
	}
	for i := range int(count) {
		if idx[i], pos, ok = avroLong(b, pos); !ok {
			return 0, 0, false
		}
	}
	return int(count), pos, true
}

// find returns the plan of the message with the given indexes, or nil.
func (p protoPlan) find(idx []int64) *protoMsgPlan {
	for i := range p.msgs {
		if m := &p.msgs[i]; len(m.indexes) == len(idx) {
			same := true
			for j := range idx {
				same = same && m.indexes[j] == idx[j]
			}
			if same {
				return m
			}
		}
	}
	return nil
}

// protoFind returns the value of the field levels lead to in message b: the last one, as Protobuf
// merges repeated occurrences of a message field and lets the last scalar win. The whole message
// is read at each level (a field may come anywhere), skipping the others by wire type. The value
// of a string or bytes field is its contents; of a varint (ints, bool, enum), its varint as
// written; of a fixed32/fixed64, float or double, its bytes.
func protoFind(b []byte, levels []protoLevel) ([]byte, Reason) {
	lv := levels[0]
	var id []byte
	r := Missing
	for pos := 0; pos < len(b); {
		tag, next, ok := protoVarint(b, pos)
		if !ok || tag>>3 == 0 {
			return nil, Malformed
		}
		wt := tag & 7
		start, end, next, ok := protoValue(b, next, wt)
		if !ok {
			return nil, Malformed
		}
		pos = next
		if tag>>3 != lv.number {
			continue
		}
		if wt != lv.wire {
			return nil, Malformed
		}
		if len(levels) == 1 {
			id, r = b[start:end], Found
			continue
		}
		sub, sr := protoFind(b[start:end], levels[1:])
		switch sr {
		case Malformed:
			return nil, Malformed
		case Found:
			id, r = sub, Found
		}
	}
	return id, r
}

// protoValue returns the bounds of the value of wire type wt at b[pos:] (for a length-delimited
// value, its payload) and the position after it.
func protoValue(b []byte, pos int, wt uint64) (start, end, next int, ok bool) {
	switch wt {
	case wireVarint:
		_, next, ok = protoVarint(b, pos)
		return pos, next, next, ok
	case wireFixed64:
		next, ok = skipN(b, pos, 8)
		return pos, next, next, ok
	case wireFixed32:
		next, ok = skipN(b, pos, 4)
		return pos, next, next, ok
	case wireLen:
		l, p, ok := protoVarint(b, pos)
		if !ok || l > uint64(len(b)-p) {
			return 0, 0, 0, false
		}
		return p, p + int(l), p + int(l), true
	}
	return 0, 0, 0, false // groups (3, 4) and unknown wire types
}

// protoVarint reads the base-128 varint at b[pos:] (at most 10 bytes).
func protoVarint(b []byte, pos int) (uint64, int, bool) {
	if pos < len(b) && b[pos] < 0x80 { // the common case: one byte
		return uint64(b[pos]), pos + 1, true
	}
	var v uint64
	for shift := uint(0); shift < 70; shift += 7 {
		if pos >= len(b) {
			return 0, 0, false
		}
		c := b[pos]
		pos++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, pos, true
		}
	}
	return 0, 0, false
}
