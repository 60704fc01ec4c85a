package docs

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

var (
	fence     = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan  = regexp.MustCompile("`+[^`]*`+")
	linkDest  = regexp.MustCompile(`\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refDef    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	heading   = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlID    = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	inlineURL = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// mdLine is one line of a markdown document outside fenced code blocks, its code spans removed.
type mdLine struct {
	n    int // 1-based
	text string
}

// prose returns the lines of doc outside fenced code blocks, with code spans removed.
func prose(doc string) []mdLine {
	var out []mdLine
	inFence := false
	for i, l := range strings.Split(doc, "\n") {
		if fence.MatchString(l) {
			inFence = !inFence
			continue
		}
		if !inFence {
			out = append(out, mdLine{i + 1, codeSpan.ReplaceAllString(l, "")})
		}
	}
	return out
}

// Slug returns the anchor GitHub gives a heading: its text lowercased, markdown links reduced to
// their text, everything but letters, digits, spaces, hyphens and underscores dropped, and
// spaces turned into hyphens.
func Slug(headingText string) string {
	t := inlineURL.ReplaceAllString(headingText, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(t) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Anchors returns the anchors of a markdown document: the slugs of its headings (a repeated
// slug gets -1, -2, ... as on GitHub, code spans kept in the text) and the id or name of its
// <a> tags.
func Anchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, l := range strings.Split(doc, "\n") {
		if fence.MatchString(l) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range htmlID.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := Slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// Links returns the link destinations of a markdown document outside code, with their line
// numbers: inline links and images, and reference definitions.
func Links(doc string) []Link {
	var out []Link
	for _, l := range prose(doc) {
		for _, m := range linkDest.FindAllStringSubmatch(l.text, -1) {
			out = append(out, Link{l.n, m[1]})
		}
		if m := refDef.FindStringSubmatch(l.text); m != nil {
			out = append(out, Link{l.n, m[1]})
		}
	}
	return out
}

// Link is one link destination of a markdown document.
type Link struct {
	Line   int
	Target string
}

// CheckLinks returns every relative link of the markdown files (paths relative to root) that does
// not resolve: to a file or directory that does not exist, or to an #anchor that the target
// markdown file (the file itself for a bare #anchor) does not define (see Anchors). Links with a
// scheme (https:, mailto:) are not followed. It returns an error if a file cannot be read.
func CheckLinks(root string, files ...string) ([]string, error) {
	var bad []string
	for _, f := range files {
		doc, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		for _, l := range Links(string(doc)) {
			if msg := checkLink(root, f, string(doc), l.Target); msg != "" {
				bad = append(bad, fmt.Sprintf("%s:%d: %s: %s", f, l.Line, l.Target, msg))
			}
		}
	}
	return bad, nil
}

// checkLink returns why target, a link of the markdown file f (relative to root, with content
// doc), does not resolve, or "".
func checkLink(root, f, doc, target string) string {
	u, err := url.Parse(target)
	switch {
	case err != nil:
		return err.Error()
	case u.Scheme != "" || u.Host != "":
		return ""
	}
	path := filepath.Join(root, filepath.Dir(f), filepath.FromSlash(u.Path))
	if strings.HasPrefix(u.Path, "/") {
		path = filepath.Join(root, filepath.FromSlash(u.Path))
	}
	if u.Path == "" {
		path = filepath.Join(root, f)
	} else if _, err := os.Stat(path); err != nil {
		return "no such file or directory"
	}
	if u.Fragment == "" {
		return ""
	}
	if !strings.HasSuffix(path, ".md") {
		return "an anchor into a file that is not markdown"
	}
	if u.Path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return err.Error()
		}
		doc = string(b)
	}
	if !Anchors(doc)[u.Fragment] {
		return "no heading makes the anchor #" + u.Fragment
	}
	return ""
}
