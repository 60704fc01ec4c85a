package main

import (
	"slices"
	"testing"

	"github.com/kdedup/kdedup/internal/tier"
)

// pending are the exported identifiers that only tests use and that are still to be moved to
// the tests (an export_test.go or a test helper package) or deleted. The list only shrinks:
// TestAPIUse fails for an identifier that is not on it, and for one on it that tests no longer
// use alone, so that it is taken off.
var pending = []string{
	"internal/kafkaio.BrokerCount",
}

// TestAPIUse runs apiuse over the module: no exported identifier of a package the binary links
// may be used only by tests, beyond those pending. It type-checks the whole module with its tests
// through the go command (a minute on a loaded machine), so it is of the process tier.
func TestAPIUse(t *testing.T) {
	tier.Process(t)
	onlyTests, _, err := check("../../..", false)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, f := range onlyTests {
		found = append(found, f.name)
		if !slices.Contains(pending, f.name) {
			t.Errorf("%s: %s; unexport it, move it to the tests, or delete it (see go run ./internal/docs/apiuse)", f.pos, f.line())
		}
	}
	for _, n := range pending {
		if !slices.Contains(found, n) {
			t.Errorf("%s is pending but no longer used only by tests: take it off the pending list", n)
		}
	}
}
