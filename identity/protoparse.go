package identity

import (
	"fmt"
	"strconv"
	"strings"
)

// A small parser of the .proto subset a schema registry returns and an identity path needs:
// package, imports (resolved through the schema's references), messages with their nested
// messages and enums, fields (with labels, map fields and oneofs) and their numbers. Options,
// reserved ranges, extensions, services and the like are read over. Message indexes follow the
// order in which messages are declared, as Confluent's serializers number them.
//
// google.golang.org/protobuf has no .proto text parser (it works from compiled descriptors), so
// using it would take a third library (a .proto compiler) to reach the same descriptors; the
// field numbers and types of one path are all that extraction needs.

// protoFile is one parsed .proto file.
type protoFile struct {
	pkg      string
	imports  []string
	messages []*protoMessage // top level, in order
	enums    map[string]bool // full names of the file's enums
}

// protoMessage is one message type.
type protoMessage struct {
	name     string // full name, without a leading dot
	fields   []protoField
	messages []*protoMessage // nested, in order
}

// protoField is one field of a message.
type protoField struct {
	name     string
	number   uint64
	typ      string // as written: a scalar type name, or a message or enum name
	repeated bool   // repeated, or a map
}

// protoTokens splits .proto source into tokens: identifiers (with dots), numbers, strings (with
// their quotes) and single punctuation characters; comments are dropped.
func protoTokens(src string) ([]string, error) {
	var toks []string
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case strings.HasPrefix(src[i:], "//"):
			j := strings.IndexByte(src[i:], '\n')
			if j < 0 {
				j = len(src) - i
			}
			i += j
		case strings.HasPrefix(src[i:], "/*"):
			j := strings.Index(src[i+2:], "*/")
			if j < 0 {
				return nil, fmt.Errorf("unterminated comment")
			}
			i += j + 4
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(src) {
				return nil, fmt.Errorf("unterminated string")
			}
			toks = append(toks, src[i:j+1])
			i = j + 1
		case isProtoIdent(c) || c == '.' || c == '-' || c == '+':
			j := i + 1
			for j < len(src) && (isProtoIdent(src[j]) || src[j] == '.') {
				j++
			}
			toks = append(toks, src[i:j])
			i = j
		default:
			toks = append(toks, src[i:i+1])
			i++
		}
	}
	return toks, nil
}

func isProtoIdent(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// protoParser parses the tokens of one file.
type protoParser struct {
	toks []string
	i    int
	file *protoFile
}

// parseProto parses .proto source.
func parseProto(src string) (*protoFile, error) {
	toks, err := protoTokens(src)
	if err != nil {
		return nil, fmt.Errorf("identity: .proto: %w", err)
	}
	p := &protoParser{toks: toks, file: &protoFile{enums: map[string]bool{}}}
	if err := p.top(); err != nil {
		return nil, fmt.Errorf("identity: .proto: %w", err)
	}
	return p.file, nil
}

func (p *protoParser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ""
}

func (p *protoParser) next() string {
	t := p.peek()
	p.i++
	return t
}

func (p *protoParser) expect(want string) error {
	if got := p.next(); got != want {
		return fmt.Errorf("want %q, got %q at token %d", want, got, p.i)
	}
	return nil
}

// top parses the file's top level.
func (p *protoParser) top() error {
	for p.i < len(p.toks) {
		switch t := p.next(); t {
		case "package":
			p.file.pkg = p.next()
			if err := p.expect(";"); err != nil {
				return err
			}
		case "import":
			if w := p.peek(); w == "public" || w == "weak" {
				p.next()
			}
			p.file.imports = append(p.file.imports, strings.Trim(p.next(), `"'`))
			if err := p.expect(";"); err != nil {
				return err
			}
		case "message":
			m, err := p.message(p.file.pkg)
			if err != nil {
				return err
			}
			p.file.messages = append(p.file.messages, m)
		case "enum":
			p.file.enums[join(p.file.pkg, p.next())] = true
			if err := p.skipBlock(); err != nil {
				return err
			}
		case ";":
		default: // syntax, edition, option, service, extend: read over
			if err := p.skipStatement(); err != nil {
				return err
			}
		}
	}
	return nil
}

// join returns scope.name, or name in the empty scope.
func join(scope, name string) string {
	if scope == "" {
		return name
	}
	return scope + "." + name
}

// message parses a message after its keyword.
func (p *protoParser) message(scope string) (*protoMessage, error) {
	m := &protoMessage{name: join(scope, p.next())}
	if err := p.expect("{"); err != nil {
		return nil, err
	}
	for {
		switch t := p.peek(); t {
		case "":
			return nil, fmt.Errorf("message %s: unexpected end", m.name)
		case "}":
			p.next()
			return m, nil
		case "message":
			p.next()
			nested, err := p.message(m.name)
			if err != nil {
				return nil, err
			}
			m.messages = append(m.messages, nested)
		case "enum":
			p.next()
			p.file.enums[join(m.name, p.next())] = true
			if err := p.skipBlock(); err != nil {
				return nil, err
			}
		case "oneof":
			p.next()
			p.next() // its name
			if err := p.expect("{"); err != nil {
				return nil, err
			}
			for p.peek() != "}" && p.peek() != "" {
				if err := p.member(m); err != nil {
					return nil, err
				}
			}
			p.next()
		case ";":
			p.next()
		default:
			if err := p.member(m); err != nil {
				return nil, err
			}
		}
	}
}

// member parses one statement of a message body: a field, or something read over.
func (p *protoParser) member(m *protoMessage) error {
	t := p.peek()
	switch t {
	case "option", "reserved", "extensions", "extend":
		p.next()
		return p.skipStatement()
	case ";":
		p.next()
		return nil
	}
	f := protoField{}
	switch t {
	case "repeated":
		f.repeated = true
		p.next()
	case "optional", "required":
		p.next()
	}
	if p.peek() == "map" && p.i+1 < len(p.toks) && p.toks[p.i+1] == "<" {
		p.i += 2
		for p.peek() != ">" && p.peek() != "" {
			p.next()
		}
		p.next()
		f.repeated, f.typ = true, "map"
	} else {
		f.typ = p.next()
	}
	if f.typ == "group" {
		return fmt.Errorf("message %s: groups are not supported", m.name)
	}
	f.name = p.next()
	if err := p.expect("="); err != nil {
		return fmt.Errorf("message %s field %s: %w", m.name, f.name, err)
	}
	n, err := strconv.ParseUint(p.next(), 0, 32)
	if err != nil || n == 0 {
		return fmt.Errorf("message %s field %s: bad field number", m.name, f.name)
	}
	f.number = n
	if err := p.skipStatement(); err != nil { // [options] ;
		return err
	}
	m.fields = append(m.fields, f)
	return nil
}

// skipStatement reads up to and including the next ';' at this level, or over a block.
func (p *protoParser) skipStatement() error {
	depth := 0
	for {
		switch p.next() {
		case "":
			return fmt.Errorf("unexpected end")
		case "{", "[", "(":
			depth++
		case "]", ")":
			depth--
		case "}":
			if depth--; depth == 0 {
				return nil
			}
		case ";":
			if depth == 0 {
				return nil
			}
		}
	}
}

// skipBlock reads over a { ... } block.
func (p *protoParser) skipBlock() error {
	if err := p.expect("{"); err != nil {
		return err
	}
	for depth := 1; depth > 0; {
		switch p.next() {
		case "":
			return fmt.Errorf("unexpected end")
		case "{":
			depth++
		case "}":
			depth--
		}
	}
	return nil
}
