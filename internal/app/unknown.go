package app

import (
	"slices"
	"strings"
)

// contractPrefixes are the prefixes of the variables kdedup owns: a variable with one of them
// that kdedup does not know is most likely a typo.
var contractPrefixes = []string{"KAFKA_", "DEDUP_", "CHECKPOINT_"}

// UnknownVar is a variable with a contract prefix (KAFKA_, DEDUP_, CHECKPOINT_) that kdedup does
// not read, and the known variable closest to it (by edit distance).
type UnknownVar struct {
	Name, Closest string
}

// UnknownVars returns the variables of environ that have a contract prefix but are not among
// EnvNames (the Config variables and the NAME_FILE forms of the secret ones), sorted by name,
// each with the closest known variable. kdedup ignores them; the worker logs a warning for each
// (a typo such as DEDUP_WINDOW_CONT=4 would otherwise go unnoticed).
func UnknownVars(environ map[string]string) []UnknownVar {
	known := strings.Fields(EnvNames())
	var out []UnknownVar
	for name := range environ {
		if !slices.ContainsFunc(contractPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) ||
			slices.Contains(known, name) {
			continue
		}
		best, bestD := "", -1
		for _, k := range known {
			if d := editDistance(name, k); bestD < 0 || d < bestD {
				best, bestD = k, d
			}
		}
		out = append(out, UnknownVar{Name: name, Closest: best})
	}
	slices.SortFunc(out, func(a, b UnknownVar) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// editDistance returns the Levenshtein distance of a and b (bytes: variable names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
