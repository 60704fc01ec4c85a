package main

import (
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestUnknownCommand checks that an unknown command fails with the usage, and that the usage, the
// help and the package doc name every subcommand that run dispatches.
func TestUnknownCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"frobnicate"}, nil, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), usage) {
		t.Errorf("exit status %d, stderr %q; want 2 and the usage", code, stderr.String())
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(src), "package main")
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var commands []string
	ast.Inspect(f, func(n ast.Node) bool {
		fd, ok := n.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "run" {
			return true
		}
		ast.Inspect(fd, func(n ast.Node) bool {
			if cc, ok := n.(*ast.CaseClause); ok && len(cc.List) > 0 {
				if lit, ok := cc.List[0].(*ast.BasicLit); ok {
					commands = append(commands, strings.Trim(lit.Value, `"`))
				}
			}
			return true
		})
		return false
	})
	if len(commands) != 6 {
		t.Errorf("run dispatches %v, want the 6 subcommands", commands)
	}
	for _, c := range commands {
		if !strings.Contains(usage, c) || !strings.Contains(doc, "//\tkdedup "+c) {
			t.Errorf("subcommand %q is missing from the usage or the package doc", c)
		}
	}
	if code := run(context.Background(), []string{"help"}, nil, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "KAFKA_BROKERS") {
		t.Errorf("help: status %d, output %q", code, stdout.String())
	}
}

// TestWorkerConfigError proves that the worker reports every configuration problem of the
// environment it is given, naming each variable, and exits with status 2 before it listens.
func TestWorkerConfigError(t *testing.T) {
	var stdout, stderr bytes.Buffer
	environ := map[string]string{"KAFKA_BATCH_TIMEOUT": "fast", "DEDUP_MODE": "shred", "HTTP_ADDR": "127.0.0.1:0"}
	if code := run(context.Background(), nil, environ, &stdout, &stderr); code != 2 {
		t.Errorf("exit status %d, want 2", code)
	}
	for _, v := range []string{"KAFKA_BROKERS", "KAFKA_INPUT_TOPIC", "KAFKA_OUTPUT_TOPIC", "KAFKA_BATCH_TIMEOUT", "DEDUP_MODE"} {
		if !strings.Contains(stderr.String(), v+":") {
			t.Errorf("stderr does not name %s:\n%s", v, &stderr)
		}
	}
}
