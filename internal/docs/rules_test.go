package docs

import (
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite README.md's import rules from Rules")

// TestImportRules checks Rules and BrokerLinkers against what go list -deps reports for every
// package of the module (tests excluded).
func TestImportRules(t *testing.T) {
	for _, v := range Check(goList(t, "Deps")) {
		t.Error(v)
	}
}

// goList returns the list field (Deps, Imports) of every package of the module, relative to
// Module, as go list reports it (tests excluded).
func goList(t *testing.T, field string) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .`+field+` " "}}`, Module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkgs[strings.TrimPrefix(f[0], Module+"/")] = f[1:]
	}
	return pkgs
}

// TestKafkaGoImports checks KafkaGoImporters against the direct imports of every package of the
// module (tests excluded), as go list reports them.
func TestKafkaGoImports(t *testing.T) {
	imports := goList(t, "Imports")
	if _, ok := imports["internal/kafkaio"]; !ok {
		t.Fatal("go list does not list internal/kafkaio")
	}
	for _, v := range CheckImports(imports) {
		t.Error(v)
	}
}

// TestCheckImportsFindsViolations feeds CheckImports imports of kafka-go inside and outside
// KafkaGoImporters and test helper packages: only those outside must be reported.
func TestCheckImportsFindsViolations(t *testing.T) {
	imports := map[string][]string{
		"internal/kafkaio":               {"github.com/segmentio/kafka-go", "github.com/segmentio/kafka-go/protocol"},
		"consumer":                       {Module + "/internal/kafkaio", "github.com/segmentio/kafka-go-extras"},
		"loadtest":                       {"context", "github.com/segmentio/kafka-go"},
		"internal/app":                   {"github.com/segmentio/kafka-go/sasl"},
		"internal/embedkafka/testbroker": {"github.com/segmentio/kafka-go"}, // a test helper package: test code
	}
	got := CheckImports(imports)
	want := []string{
		"internal/app imports github.com/segmentio/kafka-go/sasl; only internal/kafkaio may (use its types)",
		"loadtest imports github.com/segmentio/kafka-go; only internal/kafkaio may (use its types)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("CheckImports reports:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCheckFindsViolations feeds Check dependencies that break the rules: each break must be
// reported, and nothing else.
func TestCheckFindsViolations(t *testing.T) {
	deps := map[string][]string{}
	for _, r := range Rules {
		deps[r.Pkg] = []string{"github.com/prometheus/client_golang/prometheus"}
		for d := range r.allowed() {
			deps[r.Pkg] = append(deps[r.Pkg], Module+"/"+d)
		}
	}
	if v := Check(deps); len(v) != 0 {
		t.Fatalf("violations in dependencies that keep the rules: %q", v)
	}
	deps["consumer"] = append(deps["consumer"], Module+"/dedup")                              // siblings
	deps["window"] = append(deps["window"], "github.com/segmentio/kafka-go/protocol")         // a Kafka client
	deps["internal/app"] = append(deps["internal/app"], "github.com/twmb/franz-go/pkg/kfake") // the broker (a Kafka client it may use)
	deps["checkpoint/s3test"] = []string{Module + "/internal/embedkafka"}                     // the broker
	deps["checkpoint/snapshot"] = []string{Module + "/window"}                                // checkpoint's rule
	deps["dedup"] = append(deps["dedup"], Module+"/checkpoint/snapshot")                      // part of checkpoint
	deps["checkpoint/s3test"] = append(deps["checkpoint/s3test"], Module+"/internal/tier")    // a test helper: allowed
	deps["window"] = append(deps["window"], Module+"/internal/tier")                          // not a test helper
	delete(deps, "metrics")
	got := strings.Join(Check(deps), "\n")
	for _, want := range []string{
		"consumer depends on " + Module + "/dedup",
		"window depends on github.com/segmentio/kafka-go/protocol",
		"internal/app links the embedded broker",
		"checkpoint/s3test links the embedded broker",
		"checkpoint/s3test depends on " + Module + "/internal/embedkafka",
		"checkpoint/snapshot depends on " + Module + "/window",
		"metrics: no such package",
		"window depends on " + Module + "/internal/tier, which only tests and test helpers may",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Check does not report %q; it reports:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n") + 1; n != 8 {
		t.Errorf("Check reports %d violations, want 8:\n%s", n, got)
	}
}

// TestRulesAreConsistent checks that every rule names each package once and forbids only what
// it does not allow, and that consumer and dedup stay siblings.
func TestRulesAreConsistent(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Rules {
		if seen[r.Pkg] {
			t.Errorf("two rules for %s", r.Pkg)
		}
		seen[r.Pkg] = true
		for _, n := range r.Not {
			if r.allowed()[n] {
				t.Errorf("%s: the rule both allows and forbids %s", r.Pkg, n)
			}
		}
	}
	for _, pair := range [][2]string{{"consumer", "dedup"}, {"dedup", "consumer"}} {
		if r, _ := rule(pair[0]); r.allowed()[pair[1]] {
			t.Errorf("%s may depend on %s: they are siblings, joined in internal/app", pair[0], pair[1])
		}
	}
	if r, _ := rule("internal/app"); !r.allowed()["consumer"] || !r.allowed()["dedup"] {
		t.Error("internal/app does not join consumer and dedup")
	}
}

// TestREADMEImportRules fails when README.md's import rules are not the ones RulesMarkdown
// renders. Fix it with: go test ./internal/docs -run TestREADMEImportRules -update
func TestREADMEImportRules(t *testing.T) {
	const path, block = "../../README.md", "import-rules"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := RulesMarkdown()
	if *update {
		out, err := ReplaceBlock(doc, block, want)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := blockOf(doc, block)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("README.md's import rules are stale; run: go test ./internal/docs -run TestREADMEImportRules -update\n--- README\n%s--- generated\n%s", got, want)
	}
}

// TestREADMEHeadline fails when README.md's headline figures differ from docs/performance.md's
// rows (HeadlineRows); with -update it copies them.
func TestREADMEHeadline(t *testing.T) {
	const path, block = "../../README.md", "headline"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	perf, err := os.ReadFile("../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := HeadlineMarkdown(string(perf))
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		out, err := ReplaceBlock(doc, block, want)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := blockOf(doc, block)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("README.md's headline figures differ from docs/performance.md; run: go test ./internal/docs -run TestREADMEHeadline -update\n--- README\n%s--- docs/performance.md\n%s", got, want)
	}
}
