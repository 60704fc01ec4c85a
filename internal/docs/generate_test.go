package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGenerateListsEveryArtifact holds generate.go's go:generate lines to Artifacts: one line per
// artifact, naming its drift test's package and, for a test that regenerates, its test.
func TestGenerateListsEveryArtifact(t *testing.T) {
	src, err := os.ReadFile("generate.go")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(src), "\n") {
		if cmd, ok := strings.CutPrefix(l, "//go:generate "); ok {
			lines = append(lines, cmd)
		}
	}
	if len(lines) != len(Artifacts) {
		t.Fatalf("%d go:generate lines for %d artifacts", len(lines), len(Artifacts))
	}
	for i, a := range Artifacts {
		pkg, test, _ := strings.Cut(a.DriftTest, " ")
		if _, err := os.Stat(filepath.Join("..", "..", a.Path)); err != nil && !strings.Contains(a.Path, "*") {
			t.Errorf("artifact %s: %v", a.Path, err)
		}
		l := lines[i]
		if strings.HasPrefix(l, "go test") && (!strings.Contains(l, "./"+pkg+" ") || !strings.Contains(l, test)) {
			t.Errorf("go:generate line %d (%s) does not run %s", i+1, l, a.DriftTest)
		}
		if !strings.HasPrefix(l, "go test") && !strings.Contains(l, a.Path) {
			t.Errorf("go:generate line %d (%s) does not write %s", i+1, l, a.Path)
		}
	}
}

// TestDriftTestsExist checks that every artifact's drift test is a test function of its package.
func TestDriftTestsExist(t *testing.T) {
	for _, a := range Artifacts {
		pkg, test, _ := strings.Cut(a.DriftTest, " ")
		files, err := filepath.Glob(filepath.Join("..", "..", pkg, "*_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		decl := regexp.MustCompile(`(?m)^func ` + test + `\(t \*testing\.T\)`)
		found := false
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			found = found || decl.Match(b)
		}
		if !found {
			t.Errorf("%s: no test %s in %s", a.Path, test, pkg)
		}
	}
}
