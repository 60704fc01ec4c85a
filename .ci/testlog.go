//go:build ignore

// Command testlog turns `go test -json` (on stdin) into a CI log that stays short while every
// test passes and is complete when one fails: a line per package, as `go test` prints without
// -v, and, for every test that failed, its whole output (what -v would have printed for it,
// however its lines interleaved with parallel tests'). A package that failed outside a test (a
// panic, a -timeout, a build error) gets its own output and that of every test it left running.
// At the end it lists what failed, and exits with status 1 if anything did.
//
//	go test -json ./... | go run .ci/testlog.go
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// event is one line of `go test -json` (see `go doc test2json`).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string // build-output and build-fail
}

type test struct{ pkg, name string }

// log holds the output of every test and package that has not finished yet.
type log struct {
	out    map[test][]string
	order  map[string][]string // package → its tests, in the order they started
	failed []string            // the headers of what failed
}

func main() {
	l := &log{out: map[test][]string{}, order: map[string][]string{}}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Println(sc.Text()) // not test2json: pass it on
			continue
		}
		l.handle(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testlog:", err)
		os.Exit(1)
	}
	if len(l.failed) > 0 {
		fmt.Printf("\n===== %d failed:\n%s\n", len(l.failed), strings.Join(l.failed, "\n"))
		os.Exit(1)
	}
}

func (l *log) handle(e event) {
	switch {
	case e.Action == "build-output":
		k := test{pkg: e.ImportPath}
		l.out[k] = append(l.out[k], e.Output)
	case e.Action == "build-fail":
		l.fail(test{pkg: e.ImportPath}, "build failed: "+e.ImportPath)
	case e.Action == "run":
		l.order[e.Package] = append(l.order[e.Package], e.Test)
	case e.Action == "output":
		k := test{e.Package, e.Test}
		l.out[k] = append(l.out[k], e.Output)
	case e.Test != "" && (e.Action == "pass" || e.Action == "skip"):
		delete(l.out, test{e.Package, e.Test})
	case e.Test != "" && e.Action == "fail":
		l.fail(test{e.Package, e.Test}, fmt.Sprintf("FAIL %s %s (%.2fs)", e.Package, e.Test, e.Elapsed))
	case e.Test == "" && (e.Action == "pass" || e.Action == "skip"):
		l.summary(e.Package) // go test's "ok" or "?" line
		l.forget(e.Package)
	case e.Test == "" && e.Action == "fail":
		for _, name := range l.order[e.Package] {
			if k := (test{e.Package, name}); l.out[k] != nil {
				l.fail(k, fmt.Sprintf("UNFINISHED %s %s", e.Package, name))
			}
		}
		l.fail(test{pkg: e.Package}, fmt.Sprintf("FAIL %s (%.2fs)", e.Package, e.Elapsed))
		l.forget(e.Package)
	}
}

// summary prints the line with which go test ended the output of a passed or skipped package.
func (l *log) summary(pkg string) {
	for _, line := range l.out[test{pkg: pkg}] {
		if strings.HasPrefix(line, "ok ") || strings.HasPrefix(line, "? ") {
			fmt.Print(line)
		}
	}
}

// fail prints the output held for k under a header and forgets it.
func (l *log) fail(k test, header string) {
	l.failed = append(l.failed, header)
	fmt.Printf("\n===== %s\n%s", header, strings.Join(l.out[k], ""))
	delete(l.out, k)
}

// forget drops what is held for a finished package.
func (l *log) forget(pkg string) {
	for k := range l.out {
		if k.pkg == pkg {
			delete(l.out, k)
		}
	}
	delete(l.order, pkg)
}
