package layout

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the module root, seen from this package's directory.
const repoRoot = "../.."

// linkRE matches an inline Markdown link or image: [text](target) or
// ![alt](target), with an optional "title" after the target.
var linkRE = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// inlineCode matches a code span, whose text is not a link.
var inlineCode = regexp.MustCompile("`[^`]*`")

// mdDoc is one Markdown file: its links (outside code) and its heading anchors.
type mdDoc struct {
	links   []mdLink
	anchors map[string]bool
}

type mdLink struct {
	line   int
	target string
}

// readMarkdown reads path, skipping fenced code blocks for both links and
// headings.
func readMarkdown(path string) (mdDoc, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return mdDoc{}, err
	}
	d := mdDoc{anchors: map[string]bool{}}
	seen := map[string]int{}
	fence := ""
	for i, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if h, ok := strings.CutPrefix(line, "#"); ok {
			h = strings.TrimLeft(h, "#")
			if strings.HasPrefix(h, " ") {
				a := slug(h)
				if n := seen[a]; n > 0 {
					d.anchors[fmt.Sprintf("%s-%d", a, n)] = true
				} else {
					d.anchors[a] = true
				}
				seen[a]++
			}
		}
		for _, m := range linkRE.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
			d.links = append(d.links, mdLink{line: i + 1, target: m[1]})
		}
	}
	return d, nil
}

// slug is GitHub's heading anchor: lower case, letters, digits, spaces, hyphens
// and underscores kept (everything else, backticks and punctuation included,
// dropped), spaces turned into hyphens. A repeated heading gets -1, -2, ...
// (readMarkdown).
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// TestDocLinksResolve checks every relative link and image in README.md and
// docs/*.md: the file or directory it names exists, and its #anchor (if any) is
// a heading of the Markdown file it points into (or of the page itself). Web
// links are not fetched.
func TestDocLinksResolve(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{filepath.Join(repoRoot, "README.md")}, pages...)
	docs := map[string]mdDoc{}
	load := func(path string) (mdDoc, error) {
		if d, ok := docs[path]; ok {
			return d, nil
		}
		d, err := readMarkdown(path)
		if err == nil {
			docs[path] = d
		}
		return d, err
	}
	checked := 0
	for _, page := range pages {
		d, err := load(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, page)
		for _, l := range d.links {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			checked++
			file, anchor, _ := strings.Cut(l.target, "#")
			target := page
			if file != "" {
				target = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", rel, l.line, l.target, file)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s:%d: link %q: an anchor into a file that is not Markdown", rel, l.line, l.target)
				continue
			}
			td, err := load(target)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", rel, l.line, l.target, err)
				continue
			}
			if !td.anchors[anchor] {
				t.Errorf("%s:%d: link %q: no heading with anchor #%s in %s", rel, l.line, l.target, anchor, file)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found in README.md and docs/*.md: the link pattern is broken")
	}
	t.Logf("%d relative links checked in %d pages", checked, len(pages))
}

// TestSlug pins the anchor rule on headings of the kinds the docs use.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"10. Proxy overhead":                         "10-proxy-overhead",
		"Routing policies: what the study found":     "routing-policies-what-the-study-found",
		"Several routers: shared state (`state:`)":   "several-routers-shared-state-state",
		"The replica card: `GET /status/card`":       "the-replica-card-get-statuscard",
		"The router (`warden route`) in front of it": "the-router-warden-route-in-front-of-it",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}
