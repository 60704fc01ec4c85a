package docs

import (
	"bytes"
	"testing"
)

func TestReplaceBlock(t *testing.T) {
	doc := []byte("# T\n\n<!-- env-table:start -->\nold\n<!-- env-table:end -->\nafter\n")
	out, err := ReplaceBlock(doc, "env-table", "| new |\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# T\n\n<!-- env-table:start -->\n| new |\n<!-- env-table:end -->\nafter\n"
	if string(out) != want {
		t.Errorf("got %q, want %q", out, want)
	}
	if got, _ := blockOf(out, "env-table"); got != "| new |\n" {
		t.Errorf("Block = %q", got)
	}
	for name, bad := range map[string][]byte{
		"missing":   bytes.ReplaceAll(doc, []byte("start"), []byte("begin")),
		"twice":     append(bytes.Clone(doc), "<!-- env-table:end -->\n"...),
		"reversed":  []byte("<!-- env-table:end -->\n<!-- env-table:start -->\n"),
		"other one": []byte("<!-- rules:start -->\n<!-- rules:end -->\n"),
	} {
		if _, err := ReplaceBlock(bad, "env-table", "x\n"); err == nil {
			t.Errorf("%s: no error", name)
		}
		if _, err := blockOf(bad, "env-table"); err == nil {
			t.Errorf("%s: Block gives no error", name)
		}
	}
}

// blockOf returns the content of the generated block name of doc, between its markers (see
// ReplaceBlock). It returns an error unless doc has each marker once, in order.
func blockOf(doc []byte, name string) (string, error) {
	from, to, err := find(doc, name)
	if err != nil {
		return "", err
	}
	return string(doc[from:to]), nil
}
