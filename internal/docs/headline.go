package docs

import (
	"fmt"
	"strings"
)

// HeadlineRows are the rows of docs/performance.md's headline table that README.md's Performance
// section repeats, by their first cell, in README's order: the figures live in one place.
var HeadlineRows = []string{
	"end to end, 1M records, 25 % duplicates: drain of a preloaded input",
	"false-positive rate at design load, measured / configured",
	"memory vs one optimal Bloom filter of the window's N·C keys (N=8)",
}

// HeadlineMarkdown returns README's headline table: the header and the HeadlineRows of perf
// (docs/performance.md's text). It fails naming a row perf lacks or holds twice.
func HeadlineMarkdown(perf string) (string, error) {
	var b strings.Builder
	b.WriteString("| what | measured |\n|---|---|\n")
	for _, want := range HeadlineRows {
		var found []string
		for _, line := range strings.Split(perf, "\n") {
			if strings.HasPrefix(line, "| "+want+" |") {
				found = append(found, line)
			}
		}
		if len(found) != 1 {
			return "", fmt.Errorf("docs: docs/performance.md has %d rows %q, want 1", len(found), want)
		}
		b.WriteString(found[0] + "\n")
	}
	return b.String(), nil
}
