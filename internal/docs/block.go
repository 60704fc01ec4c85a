package docs

import (
	"bytes"
	"fmt"
	"strings"
)

// markers returns the comments that open and close the generated block name in a markdown
// document: <!-- name:start --> and <!-- name:end -->.
func markers(name string) (start, end string) {
	return "<!-- " + name + ":start -->", "<!-- " + name + ":end -->"
}

// find returns the offsets of the content of block name in doc: after the start marker and its
// newline, up to the end marker. It fails unless each marker appears once, in order.
func find(doc []byte, name string) (from, to int, err error) {
	start, end := markers(name)
	if bytes.Count(doc, []byte(start)) != 1 || bytes.Count(doc, []byte(end)) != 1 {
		return 0, 0, fmt.Errorf("docs: markers %s ... %s not found in order, once each", start, end)
	}
	from = bytes.Index(doc, []byte(start)) + len(start)
	to = bytes.Index(doc, []byte(end))
	if to < from {
		return 0, 0, fmt.Errorf("docs: markers %s ... %s not found in order, once each", start, end)
	}
	if from < len(doc) && doc[from] == '\n' {
		from++
	}
	return from, to, nil
}

// ReplaceBlock returns doc with the content of the generated block name replaced by content,
// which should end with a newline. The block lies between the lines <!-- name:start --> and
// <!-- name:end -->; the markers stay. It returns an error unless doc has each marker once, in
// order.
func ReplaceBlock(doc []byte, name, content string) ([]byte, error) {
	from, to, err := find(doc, name)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Write(doc[:from])
	if doc[from-1] != '\n' {
		out.WriteByte('\n')
	}
	out.WriteString(content)
	if content != "" && !strings.HasSuffix(content, "\n") {
		out.WriteByte('\n')
	}
	out.Write(doc[to:])
	return out.Bytes(), nil
}
