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
	if got, _ := Block(out, "env-table"); got != "| new |\n" {
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
		if _, err := Block(bad, "env-table"); err == nil {
			t.Errorf("%s: Block gives no error", name)
		}
	}
}
