// Command apiuse lists the exported identifiers of the kdedup module's product packages (those the
// binary, cmd/kdedup, links) that only tests use: each is exported API no package needs, and is to
// be unexported, moved to an export_test.go or a test helper package, or deleted. It type-checks
// the module with its tests (golang.org/x/tools/go/packages: the only complete way to resolve a
// method call to its declaration) and exits with status 1 when it finds any. TestAPIUse in
// internal/docs runs it, so that the list stays empty.
//
//	go run ./internal/docs/apiuse          # from the module root
//
// Test helper packages are the module's packages that no command links (testbroker, s3test,
// errorfs, registrytest, ...): only tests import them. Their API is for tests, so they are not
// judged, and what their files refer to counts as used by tests, like what a _test.go file refers
// to: an identifier that only a test helper uses is test-only too.
//
// An identifier counts as used by code when a non-test file of a linked package refers to it, in
// its own package or another. A method counts as used when it implements a method of an interface of the program
// (it may be called through the interface), and so does anything a //go:generate line, package
// main or an Example names. Struct fields are left out (they are filled by name from env tags,
// JSON and templates). -wide also lists the exported identifiers that only their own package
// and tests use: API wider than what other packages need.
package main

import (
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

const module = "github.com/kdedup/kdedup"

// use is where an object is referred to from.
type use struct {
	test     bool // from a _test.go file
	otherPkg bool // from a package other than the object's (its external test package counts as its own)
}

func main() {
	wide := flag.Bool("wide", false, "also list exported identifiers that only their own package and tests use")
	flag.Parse()
	onlyTests, ownOnly, err := check(".", *wide)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apiuse:", err)
		os.Exit(2)
	}
	for _, f := range append(onlyTests, ownOnly...) {
		fmt.Println(f.pos + ": " + f.line())
	}
	if len(onlyTests) > 0 {
		os.Exit(1)
	}
}

// finding is an exported identifier that check reports: where it is declared, its name
// (pkg.Name or pkg.Type.Method) and what uses it.
type finding struct {
	pos, name string
	ownOnly   bool // used by its own package and tests only (-wide), else by tests only
}

// line returns what apiuse prints of f after its position.
func (f finding) line() string {
	if f.ownOnly {
		return f.name + " is used only by its package and tests"
	}
	return f.name + " is used only by tests"
}

// check type-checks the module in dir (its root) with its tests and returns the exported
// identifiers only tests use, and with wide those only their own package and tests use, each
// sorted by position. It returns an error when the module does not load or type-check.
func check(dir string, wide bool) (onlyTests, ownOnly []finding, err error) {
	cfg := &packages.Config{Dir: dir, Mode: packages.NeedName | packages.NeedFiles | packages.NeedCompiledGoFiles | packages.NeedSyntax |
		packages.NeedTypes | packages.NeedTypesInfo | packages.NeedDeps | packages.NeedImports, Tests: true}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, nil, err
	}
	if packages.PrintErrors(pkgs) > 0 {
		return nil, nil, errors.New("the module does not type-check")
	}
	objs, uses := collect(pkgs, linked(pkgs))
	ifaces := interfaces(pkgs)
	for obj, pos := range objs {
		us := uses[obj]
		if viaInterface(obj, ifaces) {
			continue
		}
		code := slices.ContainsFunc(us, func(u use) bool { return !u.test })
		codeElsewhere := slices.ContainsFunc(us, func(u use) bool { return !u.test && u.otherPkg })
		tests := slices.ContainsFunc(us, func(u use) bool { return u.test })
		switch {
		case !code && tests:
			onlyTests = append(onlyTests, finding{pos: pos, name: name(obj)})
		case wide && code && !codeElsewhere && tests:
			ownOnly = append(ownOnly, finding{pos: pos, name: name(obj), ownOnly: true})
		}
	}
	byPos := func(a, b finding) int { return strings.Compare(a.pos, b.pos) }
	slices.SortFunc(onlyTests, byPos)
	slices.SortFunc(ownOnly, byPos)
	return onlyTests, ownOnly, nil
}

// name returns obj as pkg.Name or pkg.Type.Method.
func name(obj types.Object) string {
	p := strings.TrimPrefix(obj.Pkg().Path(), module+"/")
	if f, ok := obj.(*types.Func); ok {
		if r := f.Signature().Recv(); r != nil {
			t := r.Type()
			if p, ok := t.(*types.Pointer); ok {
				t = p.Elem()
			}
			if n, ok := t.(*types.Named); ok {
				return p + "." + n.Obj().Name() + "." + obj.Name()
			}
		}
	}
	return p + "." + obj.Name()
}

// linked returns the import paths of the packages the module's commands link (the non-test
// dependencies of its package main).
func linked(pkgs []*packages.Package) map[string]bool {
	out := map[string]bool{}
	var add func(p *packages.Package)
	add = func(p *packages.Package) {
		if out[p.PkgPath] {
			return
		}
		out[p.PkgPath] = true
		for _, d := range p.Imports {
			add(d)
		}
	}
	for _, p := range pkgs {
		if p.Name == "main" && p.ID == p.PkgPath && !strings.HasSuffix(p.PkgPath, ".test") {
			add(p)
		}
	}
	return out
}

// collect returns the exported package-level objects and methods declared in the non-test files
// of the linked packages other than main (with their positions), and every use of any object.
func collect(pkgs []*packages.Package, linked map[string]bool) (map[types.Object]string, map[types.Object][]use) {
	objs := map[types.Object]string{}
	uses := map[types.Object][]use{}
	seen := map[string]bool{}
	for _, p := range pkgs {
		if !strings.HasPrefix(p.PkgPath, module) {
			continue
		}
		for i, f := range p.Syntax {
			file := p.CompiledGoFiles[i]
			if seen[file] && !strings.HasSuffix(file, "_test.go") {
				// a package's files appear in it and in its test variant: count them once
				continue
			}
			seen[file] = true
			own := strings.TrimSuffix(p.PkgPath, "_test")
			test := strings.HasSuffix(file, "_test.go") || !linked[own] // a test helper package's files are test code
			for id, obj := range p.TypesInfo.Uses {
				if obj.Pkg() == nil || !strings.HasPrefix(obj.Pkg().Path(), module) || !within(p.Fset, f, id) {
					continue
				}
				uses[origin(obj)] = append(uses[origin(obj)], use{test: test, otherPkg: obj.Pkg().Path() != own})
			}
			if test || p.Name == "main" || !linked[p.PkgPath] {
				continue
			}
			for id, obj := range p.TypesInfo.Defs {
				if obj == nil || !obj.Exported() || !within(p.Fset, f, id) || !declared(obj) {
					continue
				}
				objs[origin(obj)] = p.Fset.Position(id.Pos()).String()
			}
		}
	}
	return objs, uses
}

// origin returns the generic declaration of an instantiated object.
func origin(obj types.Object) types.Object {
	switch o := obj.(type) {
	case *types.Func:
		return o.Origin()
	case *types.Var:
		return o.Origin()
	}
	return obj
}

// within reports whether id is in the file f.
func within(fset *token.FileSet, f *ast.File, id *ast.Ident) bool {
	return f.FileStart <= id.Pos() && id.Pos() < f.FileEnd
}

// declared reports whether obj is a package-level object or a method: what apiuse judges.
func declared(obj types.Object) bool {
	if f, ok := obj.(*types.Func); ok && f.Signature().Recv() != nil {
		return true
	}
	_, isField := obj.(*types.Var)
	return obj.Parent() == obj.Pkg().Scope() && !(isField && obj.Parent() == nil)
}

// interfaces returns every interface of the program (the module and its dependencies) by the
// names of its methods.
func interfaces(pkgs []*packages.Package) map[string][]*types.Interface {
	out := map[string][]*types.Interface{}
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		if p.Types == nil {
			return
		}
		s := p.Types.Scope()
		for _, n := range s.Names() {
			tn, ok := s.Lookup(n).(*types.TypeName)
			if !ok {
				continue
			}
			if it, ok := tn.Type().Underlying().(*types.Interface); ok {
				for i := range it.NumMethods() {
					out[it.Method(i).Name()] = append(out[it.Method(i).Name()], it)
				}
			}
		}
	})
	return out
}

// viaInterface reports whether obj is a method that implements a method of an interface.
func viaInterface(obj types.Object, ifaces map[string][]*types.Interface) bool {
	f, ok := obj.(*types.Func)
	if !ok || f.Signature().Recv() == nil {
		return false
	}
	recv := f.Signature().Recv().Type()
	if _, isIface := recv.Underlying().(*types.Interface); isIface {
		return true // an interface's own method is judged by its uses through the interface
	}
	if p, ok := recv.(*types.Pointer); ok {
		recv = p.Elem()
	}
	for _, it := range ifaces[f.Name()] {
		if types.Implements(recv, it) || types.Implements(types.NewPointer(recv), it) {
			return true
		}
	}
	return false
}
