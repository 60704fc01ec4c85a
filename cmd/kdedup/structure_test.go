package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// importRule is one import claim of the README.
type importRule struct {
	claim  string
	pkg    string   // the package the claim is about; "" for the embedded broker's claim
	kdedup []string // the kdedup packages pkg may depend on
	kafka  bool     // whether pkg may depend on a Kafka client
}

// allows reports whether r's package may depend on the kdedup package own: one of r.kdedup, or a
// subpackage of one of them or of r's package itself (checkpoint/snapshot is part of checkpoint).
func (r importRule) allows(own string) bool {
	return slices.ContainsFunc(append([]string{r.pkg}, r.kdedup...), func(p string) bool {
		return own == p && p != r.pkg || strings.HasPrefix(own, p+"/")
	})
}

// TestREADMEStructure checks the import claims of the README's Development section against
// go list: every claim there has a rule here, every rule here is claimed there, and every rule
// holds for the packages' dependencies (tests excluded).
func TestREADMEStructure(t *testing.T) {
	const mod = "github.com/kdedup/kdedup/"
	rules := []importRule{
		{"`consumer` imports `internal/kafkaio` and `internal/grace` and nothing else of kdedup: not `dedup`.", "consumer", []string{"internal/kafkaio", "internal/grace"}, true},
		{"`dedup` imports `window` and `checkpoint`, and no Kafka client: not `consumer`.", "dedup", []string{"window", "checkpoint"}, false},
		{"`window` imports nothing of kdedup and no Kafka client.", "window", nil, false},
		{"`checkpoint` imports nothing of kdedup (no `window`) and no Kafka client.", "checkpoint", nil, false},
		{"`metrics` imports only `checkpoint` (for the restore outcome) and no Kafka client.", "metrics", []string{"checkpoint"}, false},
		{"`loadtest` imports `internal/kafkaio` and nothing else of kdedup.", "loadtest", []string{"internal/kafkaio"}, true},
		{"Only `cmd/kdedup` links the embedded broker, `internal/embedkafka` (kfake).", "", nil, true},
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "`go list -deps` shows them")
	section, _, _ = strings.Cut(section, "\n\n"+"CI ")
	var claims []string
	for _, line := range strings.Split(section, "\n") {
		if c, ok := strings.CutPrefix(line, "- "); ok {
			claims = append(claims, c)
		}
	}
	for _, r := range rules {
		if !slices.Contains(claims, r.claim) {
			t.Errorf("the README does not claim %q", r.claim)
		}
	}
	for _, c := range claims {
		if !slices.ContainsFunc(rules, func(r importRule) bool { return r.claim == c }) {
			t.Errorf("the README claims %q, which no rule checks", c)
		}
	}

	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		deps[strings.TrimPrefix(f[0], mod)] = f[1:]
	}
	isKafka := func(d string) bool {
		return strings.HasPrefix(d, "github.com/segmentio/kafka-go") || strings.HasPrefix(d, "github.com/twmb/franz-go")
	}
	for _, r := range rules {
		if r.pkg == "" {
			for pkg, ds := range deps {
				if pkg == "cmd/kdedup" || pkg == "internal/embedkafka" {
					continue
				}
				if slices.Contains(ds, mod+"internal/embedkafka") || slices.Contains(ds, "github.com/twmb/franz-go/pkg/kfake") {
					t.Errorf("%s links the embedded broker: %s", pkg, r.claim)
				}
			}
			continue
		}
		ds, ok := deps[r.pkg]
		if !ok {
			t.Errorf("go list does not know %s", r.pkg)
		}
		for _, d := range ds {
			own, isOwn := strings.CutPrefix(d, mod)
			if isOwn && !r.allows(own) || !r.kafka && isKafka(d) {
				t.Errorf("%s depends on %s, but the README says: %s", r.pkg, d, r.claim)
			}
		}
	}
}
