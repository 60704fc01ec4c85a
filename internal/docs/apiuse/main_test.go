package main

import (
	"testing"

	"github.com/kdedup/kdedup/internal/tier"
)

// TestAPIUse runs apiuse over the module: no exported identifier of a package the binary links
// may be used only by tests. It type-checks the whole module with its tests through the go
// command (a minute on a loaded machine), so it is of the process tier.
func TestAPIUse(t *testing.T) {
	tier.Process(t)
	onlyTests, _, err := check("../../..", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range onlyTests {
		t.Errorf("%s: %s; unexport it, move it to the tests (an export_test.go or a test helper package), or delete it (see go run ./internal/docs/apiuse)", f.pos, f.line())
	}
}
