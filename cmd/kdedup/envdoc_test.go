package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdedup/kdedup/internal/app"
)

// TestREADMEEnvTable fails when the README's configuration table is not the one generated from
// the struct tags. Fix it with: go run ./cmd/kdedup envdoc -update README.md
func TestREADMEEnvTable(t *testing.T) {
	doc, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	got, err := currentEnvTable(doc)
	if err != nil {
		t.Fatal(err)
	}
	if want := envTable(); got != want {
		t.Errorf("README.md's env table is stale; run: go run ./cmd/kdedup envdoc -update README.md\n--- README\n%s\n--- generated\n%s", got, want)
	}
}

// TestEnvTable proves the table lists every variable once with its default, marks required ones,
// and escapes pipes inside cells.
func TestEnvTable(t *testing.T) {
	table := envTable()
	for _, v := range app.EnvVars() {
		if n := strings.Count(table, "| `"+v.Name+"` |"); n != 1 {
			t.Errorf("%s appears %d times", v.Name, n)
		}
	}
	for _, want := range []string{
		"| `KAFKA_BROKERS` | *required* |",
		"| `KAFKA_BATCH_TIMEOUT` | `5ms` |",
		"| `DEDUP_WINDOW_COUNT` | `8` |",
		"| `DEDUP_DUPLICATES_TOPIC` | *empty* |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	for i, line := range strings.Split(strings.TrimSpace(table), "\n") {
		if cells := strings.Count(strings.ReplaceAll(line, `\|`, ""), "|"); cells != 4 {
			t.Errorf("line %d has %d unescaped pipes, want 4: %s", i, cells, line)
		}
	}
}

func TestReplaceEnvTable(t *testing.T) {
	doc := []byte("# T\n\n<!-- env-table:start -->\nold\n<!-- env-table:end -->\nafter\n")
	out, err := replaceEnvTable(doc, "| new |\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# T\n\n<!-- env-table:start -->\n| new |\n<!-- env-table:end -->\nafter\n"
	if string(out) != want {
		t.Errorf("got %q, want %q", out, want)
	}
	if got, _ := currentEnvTable(out); got != "| new |\n" {
		t.Errorf("currentEnvTable = %q", got)
	}
	if _, err := replaceEnvTable(bytes.ReplaceAll(doc, []byte("start"), []byte("begin")), "x"); err == nil {
		t.Error("missing marker not reported")
	}
}

// TestDeployEnvVars fails when deploy/env-vars.txt, which the tools module checks the chart, the
// compose file and the Dockerfile against, differs from the variables the binary accepts.
// Regenerate it with: go run ./cmd/kdedup envdoc -names > deploy/env-vars.txt
func TestDeployEnvVars(t *testing.T) {
	got, err := os.ReadFile(filepath.Join("..", "..", "deploy", "env-vars.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != envNames() {
		t.Errorf("deploy/env-vars.txt is out of date; run: go run ./cmd/kdedup envdoc -names > deploy/env-vars.txt\nhave:\n%s\nwant:\n%s", got, envNames())
	}
}
