package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdedup/kdedup/internal/app"
	"github.com/kdedup/kdedup/internal/docs"
)

// TestREADMEEnvTable fails when the README's configuration table is not the one generated from
// the struct tags. Fix it with: go run ./cmd/kdedup envdoc -update README.md
func TestREADMEEnvTable(t *testing.T) {
	doc, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := docs.ReplaceBlock(doc, app.EnvTableBlock, app.EnvTable())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, want) {
		t.Errorf("README.md's env table is stale; run: go run ./cmd/kdedup envdoc -update README.md\n--- generated\n%s", app.EnvTable())
	}
}

// TestEnvDocCommand runs envdoc: the table, the names, and -update on a copy of a document, which
// must then hold the table between its markers and nothing else changed.
func TestEnvDocCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"envdoc"}, nil, &stdout, &stderr); code != 0 || stdout.String() != app.EnvTable() {
		t.Errorf("envdoc: status %d, output %q", code, stdout.String())
	}
	stdout.Reset()
	if code := run(t.Context(), []string{"envdoc", "-names"}, nil, &stdout, &stderr); code != 0 || stdout.String() != app.EnvNames() {
		t.Errorf("envdoc -names: status %d, output %q", code, stdout.String())
	}
	path := filepath.Join(t.TempDir(), "doc.md")
	doc := "# T\n\n<!-- env-table:start -->\nold\n<!-- env-table:end -->\nafter\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := run(t.Context(), []string{"envdoc", "-update", path}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("envdoc -update: status %d: %s", code, &stderr)
	}
	got, _ := os.ReadFile(path)
	if want := strings.Replace(doc, "old\n", app.EnvTable(), 1); string(got) != want {
		t.Errorf("envdoc -update wrote %q, want %q", got, want)
	}
	if err := os.WriteFile(path, []byte("# no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run(t.Context(), []string{"envdoc", "-update", path}, nil, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "env-table:start") {
		t.Errorf("envdoc -update without markers: status %d, stderr %q; want 1 and the markers", code, &stderr)
	}
	if code := run(t.Context(), []string{"envdoc", "-bogus"}, nil, &stdout, &stderr); code != 2 {
		t.Errorf("envdoc -bogus: status %d, want 2", code)
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
	if string(got) != app.EnvNames() {
		t.Errorf("deploy/env-vars.txt is out of date; run: go run ./cmd/kdedup envdoc -names > deploy/env-vars.txt\nhave:\n%s\nwant:\n%s", got, app.EnvNames())
	}
}
