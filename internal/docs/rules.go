package docs

import (
	"fmt"
	"slices"
	"strings"
)

// Module is the import path of the kdedup module; Rule names packages relative to it.
const Module = "github.com/kdedup/kdedup"

// Rule is one import rule of the module: which kdedup packages Pkg may depend on, directly or
// not (as go list -deps reports them, tests excluded), and whether it may depend on a Kafka
// client. A package listed in Deps that has a rule of its own brings along what that rule allows.
// A package's subpackages count as the package: the rule holds for them too, and a package that
// may depend on another may depend on its subpackages (checkpoint/snapshot is part of checkpoint).
type Rule struct {
	Pkg   string   // the package, relative to Module
	Deps  []string // the kdedup packages Pkg may depend on; none when empty
	Not   []string // packages the rule stresses Pkg must not depend on (never allowed by Deps)
	Why   string   // what the dependencies are for, shown in parentheses after them; optional
	Kafka bool     // whether Pkg may depend on a Kafka client (kafka-go, franz-go)
}

// Rules are the module's import rules: README's Development section lists them (RulesMarkdown),
// and a test checks them against go list (Check). consumer and dedup are siblings: neither
// depends on the other, and internal/app joins them.
var Rules = []Rule{
	{Pkg: "consumer", Deps: []string{"identity", "internal/kafkaio", "internal/grace"}, Not: []string{"dedup"}, Kafka: true},
	{Pkg: "dedup", Deps: []string{"identity", "window", "checkpoint"}, Not: []string{"consumer"}},
	{Pkg: "identity"},
	{Pkg: "window"},
	{Pkg: "checkpoint", Not: []string{"window"}},
	{Pkg: "metrics", Deps: []string{"checkpoint"}, Why: "for the restore outcome"},
	{Pkg: "loadtest", Deps: []string{"identity", "internal/kafkaio"}, Kafka: true},
	{Pkg: "internal/embedkafka", Deps: []string{"internal/kafkaio"}, Kafka: true},
	{Pkg: "internal/app", Deps: []string{"consumer", "dedup", "metrics", "internal/grace"},
		Not: []string{"loadtest", "internal/embedkafka"}, Why: "it joins `consumer` and `dedup`", Kafka: true},
	{Pkg: "internal/loadrun", Deps: []string{"internal/app", "loadtest", "internal/embedkafka", "internal/scrape"},
		Why: "the demo and the loadtest's embedded worker", Kafka: true},
	{Pkg: "internal/scrape"},
	{Pkg: "internal/docs"},
}

// BrokerLinkers are the only packages, besides internal/embedkafka itself, that may link the
// embedded broker (internal/embedkafka, kfake): the binary, for its demo and loadtest.
var BrokerLinkers = []string{"cmd/kdedup", "internal/loadrun"}

// KafkaGoImporters are the only packages whose non-test files may import kafka-go
// (github.com/segmentio/kafka-go and its subpackages) directly: the one Kafka wire layer, so that
// kafka-go's types stop there. Other packages reach kafka-go through it (Rule.Kafka), and their
// tests, test helper packages included (see testHelper: test code, which the product does not
// link), may import kafka-go for baselines and fixtures.
var KafkaGoImporters = []string{"internal/kafkaio"}

// TestOnly are packages that only tests and test helper packages (see testHelper) may depend on,
// whatever their rule says: the test-tier switch.
var TestOnly = []string{"internal/tier"}

// testHelper reports whether pkg is a test helper package: its last path element begins or ends
// with "test" (checkpoint/s3test, internal/embedkafka/testbroker).
func testHelper(pkg string) bool {
	last := pkg[strings.LastIndex(pkg, "/")+1:]
	return strings.HasPrefix(last, "test") || strings.HasSuffix(last, "test")
}

// broker reports whether the import path is the embedded broker or kfake.
func broker(path string) bool {
	return path == Module+"/internal/embedkafka" || strings.HasPrefix(path, "github.com/twmb/franz-go/pkg/kfake")
}

// kafkaClient reports whether the import path belongs to a Kafka client.
func kafkaClient(path string) bool {
	return strings.HasPrefix(path, "github.com/segmentio/kafka-go") || strings.HasPrefix(path, "github.com/twmb/franz-go")
}

// code renders package names as inline code.
func code(pkgs []string) []string {
	out := make([]string, len(pkgs))
	for i, p := range pkgs {
		out[i] = "`" + p + "`"
	}
	return out
}

// join joins items as "a", "a and b" or "a, b and c" (with conj for "and").
func join(items []string, conj string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " " + conj + " " + items[len(items)-1]
}

// Claim returns the rule as one sentence of README's list.
func (r Rule) Claim() string {
	var b strings.Builder
	fmt.Fprintf(&b, "`%s` ", r.Pkg)
	if len(r.Deps) == 0 {
		b.WriteString("imports nothing of kdedup")
	} else {
		b.WriteString("imports " + join(code(r.Deps), "and"))
		if r.Why != "" {
			b.WriteString(" (" + r.Why + ")")
		}
		if slices.ContainsFunc(r.Deps, func(d string) bool { dr, ok := rule(d); return ok && len(dr.Deps) > 0 }) {
			b.WriteString(", with what they import,")
		}
		b.WriteString(" and nothing else of kdedup")
	}
	if len(r.Not) > 0 {
		b.WriteString(": not " + join(code(r.Not), "or"))
	}
	if !r.Kafka {
		b.WriteString(", and no Kafka client")
	}
	return b.String() + "."
}

// RulesMarkdown returns the rules as README's markdown list, one line per rule, the embedded
// broker's last.
func RulesMarkdown() string {
	var b strings.Builder
	for _, r := range Rules {
		b.WriteString("- " + r.Claim() + "\n")
	}
	fmt.Fprintf(&b, "- Only %s link the embedded broker, `internal/embedkafka` (kfake).\n", join(code(BrokerLinkers), "and"))
	fmt.Fprintf(&b, "- Only tests and test helper packages import %s.\n", join(code(TestOnly), "and"))
	fmt.Fprintf(&b, "- Only %s and tests import kafka-go itself; the other packages use kdedup's types (`kafkaio.Record`).\n",
		join(code(KafkaGoImporters), "and"))
	return b.String()
}

// kafkaGo reports whether the import path is kafka-go or one of its subpackages.
func kafkaGo(path string) bool {
	return path == "github.com/segmentio/kafka-go" || strings.HasPrefix(path, "github.com/segmentio/kafka-go/")
}

// CheckImports returns every violation of KafkaGoImporters in imports, which maps each package of
// the module (relative to Module) to the import paths its non-test files import directly, as
// go list reports them in Imports. Test helper packages (testHelper) are test code and may.
func CheckImports(imports map[string][]string) []string {
	var bad []string
	for pkg, is := range imports {
		if _, product := rule(pkg); testHelper(pkg) && !product || slices.ContainsFunc(KafkaGoImporters, func(p string) bool { return within(pkg, p) }) {
			continue // a test helper package (loadtest, with a rule of its own, is a product package)
		}
		if i := slices.IndexFunc(is, kafkaGo); i >= 0 {
			bad = append(bad, fmt.Sprintf("%s imports %s; only %s may (use its types)", pkg, is[i], join(KafkaGoImporters, "and")))
		}
	}
	slices.Sort(bad)
	return bad
}

// rule returns the rule of pkg.
func rule(pkg string) (Rule, bool) {
	i := slices.IndexFunc(Rules, func(r Rule) bool { return r.Pkg == pkg })
	if i < 0 {
		return Rule{}, false
	}
	return Rules[i], true
}

// within reports whether pkg is p or one of its subpackages.
func within(pkg, p string) bool {
	return pkg == p || strings.HasPrefix(pkg, p+"/")
}

// allows reports whether r lets a package it covers depend on the kdedup package own: one that
// allowed (see Rule.allowed) holds, r's own package, or a subpackage of either.
func (r Rule) allows(allowed map[string]bool, own string) bool {
	if within(own, r.Pkg) {
		return true
	}
	for p := range allowed {
		if within(own, p) {
			return true
		}
	}
	return false
}

// allowed returns the kdedup packages r lets its package depend on: its Deps and, for each of
// them that has a rule, what that rule allows.
func (r Rule) allowed() map[string]bool {
	out := map[string]bool{}
	var add func(deps []string)
	add = func(deps []string) {
		for _, d := range deps {
			if out[d] {
				continue
			}
			out[d] = true
			if dr, ok := rule(d); ok {
				add(dr.Deps)
			}
		}
	}
	add(r.Deps)
	return out
}

// Check returns every violation of Rules and BrokerLinkers in deps, which maps each package of
// the module (relative to Module) to the import paths of everything it depends on, as
// go list -deps reports them. A rule whose package deps lacks, or whose Not contradicts its
// Deps, is a violation too.
func Check(deps map[string][]string) []string {
	var bad []string
	for _, r := range Rules {
		if _, ok := deps[r.Pkg]; !ok {
			bad = append(bad, fmt.Sprintf("%s: no such package", r.Pkg))
			continue
		}
		allowed := r.allowed()
		for _, n := range r.Not {
			if allowed[n] {
				bad = append(bad, fmt.Sprintf("%s: the rule both allows and forbids %s", r.Pkg, n))
			}
		}
		for pkg, ds := range deps {
			if !within(pkg, r.Pkg) {
				continue
			}
			for _, d := range ds {
				own, isOwn := strings.CutPrefix(d, Module+"/")
				if isOwn && slices.Contains(TestOnly, own) {
					if !testHelper(pkg) {
						bad = append(bad, fmt.Sprintf("%s depends on %s, which only tests and test helpers may", pkg, d))
					}
					continue
				}
				if isOwn && !r.allows(allowed, own) || !r.Kafka && kafkaClient(d) {
					bad = append(bad, fmt.Sprintf("%s depends on %s, but the rule says: %s", pkg, d, r.Claim()))
				}
			}
		}
	}
	for pkg, ds := range deps {
		if within(pkg, "internal/embedkafka") || slices.ContainsFunc(BrokerLinkers, func(p string) bool { return within(pkg, p) }) {
			continue
		}
		if i := slices.IndexFunc(ds, broker); i >= 0 {
			bad = append(bad, fmt.Sprintf("%s links the embedded broker (%s); only %s may", pkg, ds[i], join(BrokerLinkers, "and")))
		}
	}
	slices.Sort(bad)
	return bad
}
