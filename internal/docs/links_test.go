package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestMarkdownLinks checks that every relative link and #anchor of the repository's markdown
// files resolves: README.md, docs/*.md and the other modules' and the chart's READMEs (test
// fixtures under testdata aside).
func TestMarkdownLinks(t *testing.T) {
	const root = "../.."
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			files = append(files, rel)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"README.md", filepath.Join("docs", "design.md"), filepath.Join("docs", "operations.md")} {
		if !slices.Contains(files, want) {
			t.Fatalf("%s not found among %q", want, files)
		}
	}
	bad, err := CheckLinks(root, files...)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
}

// TestCheckLinksFindsBroken runs CheckLinks on testdata/links: the links that resolve (files,
// directories, anchors of headings with code, repeated headings and <a> ids, links with titles)
// pass, links in code are ignored, and each broken one is reported.
func TestCheckLinksFindsBroken(t *testing.T) {
	bad, err := CheckLinks("testdata/links", "a.md", "sub/b.md")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"a.md:7: missing.md: no such file or directory",
		"a.md:8: #no-such-heading: no heading makes the anchor #no-such-heading",
		"a.md:9: sub/b.md#nope: no heading makes the anchor #nope",
		"a.md:10: nosuch/: no such file or directory",
		"a.md:19: sub/c.txt#x: an anchor into a file that is not markdown",
		"sub/b.md:3: ../a.md#the-window-package-window-1: no heading makes the anchor #the-window-package-window-1",
	}
	slices.Sort(bad)
	slices.Sort(want)
	if strings.Join(bad, "\n") != strings.Join(want, "\n") {
		t.Errorf("CheckLinks reports:\n%s\nwant:\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"The filter (package `window`)":            "the-filter-package-window",
		"Record identity (`DEDUP_KEY`)":            "record-identity-dedup_key",
		"Duplicates: drop, mark, side topic":       "duplicates-drop-mark-side-topic",
		"Choosing a store: what a rebalance costs": "choosing-a-store-what-a-rebalance-costs",
		"See [the guide](x.md) now":                "see-the-guide-now",
		"Größe – 2×":                               "größe--2",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// runbookBase is the address under which the alerts' runbook_url annotations name files of the
// repository.
const runbookBase = "https://github.com/kdedup/kdedup/blob/main/"

// TestAlertRunbookLinks checks that every alert of deploy/prometheus/alerts.yml has a runbook_url
// into this repository's docs whose file and anchor resolve, and that the anchor is the alert's
// own section (its name in lower case).
func TestAlertRunbookLinks(t *testing.T) {
	const root = "../.."
	data, err := os.ReadFile(filepath.Join(root, "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	alert := regexp.MustCompile(`^\s*- alert:\s*(\S+)`)
	url := regexp.MustCompile(`^\s*runbook_url:\s*"?([^"\s]+)"?`)
	var name string
	urls := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		if m := alert.FindStringSubmatch(l); m != nil {
			name = m[1]
			urls[name] = ""
		}
		if m := url.FindStringSubmatch(l); m != nil {
			urls[name] = m[1]
		}
	}
	if len(urls) < 10 {
		t.Fatalf("found %d alerts in alerts.yml", len(urls))
	}
	for name, u := range urls {
		rel, ok := strings.CutPrefix(u, runbookBase)
		switch {
		case !ok:
			t.Errorf("%s: runbook_url %q is not under %s", name, u, runbookBase)
		case !strings.HasSuffix(rel, "#"+strings.ToLower(name)):
			t.Errorf("%s: runbook_url %q does not link to the alert's own section", name, u)
		default:
			if msg := checkLink(root, "README.md", "", rel); msg != "" {
				t.Errorf("%s: runbook_url %s: %s", name, u, msg)
			}
		}
	}
}

// TestREADMEIsAnEntryPoint keeps README.md at most 400 lines: manuals belong in docs/.
func TestREADMEIsAnEntryPoint(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > 400 {
		t.Errorf("README.md has %d lines, want at most 400: move manuals to docs/ and link them", n)
	}
}
