package docs

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMarkdownLinks checks that every relative link and #anchor of README.md and docs/*.md
// resolves.
func TestMarkdownLinks(t *testing.T) {
	const root = "../.."
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	rel := []string{"README.md"}
	for _, f := range files {
		rel = append(rel, filepath.Join("docs", filepath.Base(f)))
	}
	bad, err := CheckLinks(root, rel...)
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
