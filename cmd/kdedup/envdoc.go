package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/kdedup/kdedup/internal/app"
	"github.com/kdedup/kdedup/internal/docs"
)

// runEnvDoc prints the table, or with -update FILE rewrites it in FILE, or with -names prints the
// variable names.
func runEnvDoc(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("envdoc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	update := fs.String("update", "", "rewrite the table between the env-table markers of this markdown `file`")
	names := fs.Bool("names", false, "print only the variable names, one per line (deploy/env-vars.txt)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *names {
		io.WriteString(stdout, app.EnvNames())
		return 0
	}
	if *update == "" {
		io.WriteString(stdout, app.EnvTable())
		return 0
	}
	doc, err := os.ReadFile(*update)
	if err != nil {
		fmt.Fprintf(stderr, "kdedup envdoc: %v\n", err)
		return 1
	}
	out, err := docs.ReplaceBlock(doc, app.EnvTableBlock, app.EnvTable())
	if err != nil {
		fmt.Fprintf(stderr, "kdedup envdoc: %s: %v\n", *update, err)
		return 1
	}
	if err := os.WriteFile(*update, out, 0o644); err != nil {
		fmt.Fprintf(stderr, "kdedup envdoc: %v\n", err)
		return 1
	}
	return 0
}
