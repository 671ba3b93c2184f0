package layout

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A citation must name what a reader can open (docs/DESIGN-NOTES.md,
// "Contributing"): an engine's source file, a public repository's issue or pull
// request as owner/repo#N (or "owner/repo PR #N", "owner/repo issue #N"), or a
// page of this repository. TestCitationsResolve fails on the kinds that point
// nowhere: the planning notes kept beside the repository, never published (their
// name, briefWord; their page names, briefPages; their numbered list of peers'
// bugs, peersCase), and an issue or pull request number without the repository
// it belongs to (this project's own issue numbers included). TestCitePatterns
// has examples of each, and of what is left alone.

// briefPages are the planning notes' page names and the study's output page;
// each must be written as a path that exists in the repository
// (results/study/...) or as a placeholder path (<out>/...).
var briefPages = regexp.MustCompile(`\b(peers|signals|workload|clients|vllm|architecture|style|libraries)\.md\b`)

// briefWord is the planning notes' name, singular or plural (the adverb is
// another word); after "be" or "in" it is English, not a citation.
var briefWord = regexp.MustCompile(`(?i)\bbriefs?\b`)
var briefEnglish = regexp.MustCompile(`(?i)\b(be|in)\s+$`)

// peersCase is a numbered case of the planning notes' list of peers' bugs,
// cited by its number without the page name.
var peersCase = regexp.MustCompile(`(?i)\bpeers'?\s+(router\s+)?cases?\s+\d+`)

// issueNum is a bare number after '#', and issueWord a number after the word
// issue (or issues), with or without '#'.
var (
	issueNum  = regexp.MustCompile(`#\d+\b`)
	issueWord = regexp.MustCompile(`(?i)\bissues?\s+#?\d+`)
	// The text before an accepted reference ends in owner/repo right before
	// '#' (ownerRepoTight), or in owner/repo and a word such as PR before the
	// '#' (ownerRepoWord) or before the word issue (ownerRepoSpace).
	ownerRepoTight = regexp.MustCompile(`\b[\w.-]+/[\w.-]+$`)
	issueBefore    = regexp.MustCompile(`(?i)\bissues?\s+$`)
	ownerRepoSpace = regexp.MustCompile(`\b[\w.-]+/[\w.-]+\s+$`)
	ownerRepoWord  = regexp.MustCompile(`(?i)\b[\w.-]+/[\w.-]+\s+(pr|prs|pull request|issue|issues|discussion)\s+$`)
	// hexColor is a CSS colour such as #1f77b4 or #000.
	hexColor = regexp.MustCompile(`^#([0-9a-fA-F]{3}|[0-9a-fA-F]{4}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})$`)
	colorCtx = regexp.MustCompile(`(?i)\b(colou?rs?|fill|stroke|background|rgba?|css)\b`)
	// urlRE is a web address: its fragment (#L12, #issuecomment-3) is no citation.
	urlRE = regexp.MustCompile(`https?://\S+`)
	// mdLinkTarget is a Markdown link target: router.md#10-proxy-overhead.
	mdLinkTarget = regexp.MustCompile(`\]\([^)]*\)`)
	// pathToken is the path a page name is part of, read leftwards from it.
	pathToken = regexp.MustCompile(`[\w./<>~-]*$`)
)

// citeProblems returns what is wrong with one line of prose (a comment line or
// a Markdown line outside code blocks). root resolves page paths.
func citeProblems(root, line string) []string {
	var out []string
	for _, m := range briefWord.FindAllStringIndex(line, -1) {
		if !briefEnglish.MatchString(line[:m[0]]) {
			out = append(out, "cites the planning brief ("+strings.TrimSpace(line[max(0, m[0]-20):min(len(line), m[1]+20)])+"): state the rule, cite its public source or a docs/ page")
		}
	}
	for _, m := range peersCase.FindAllString(line, -1) {
		out = append(out, "cites \""+m+"\" of the planning notes: state the rule, cite its public source or a docs/ page (docs/router.md and docs/bench.md list the failure cases)")
	}
	for _, m := range briefPages.FindAllStringIndex(line, -1) {
		tok := pathToken.FindString(line[:m[0]]) + line[m[0]:m[1]]
		tok = strings.TrimLeft(tok, ".")
		if strings.HasPrefix(tok, "/") {
			tok = strings.TrimLeft(tok, "/")
		}
		switch {
		case strings.Contains(tok, "brief"):
			// counted by briefWord
		case strings.HasPrefix(tok, "<") && strings.Contains(tok, ">/"):
			// a placeholder path: <out>/signals.md
		case strings.Contains(tok, "/") && exists(filepath.Join(root, filepath.FromSlash(tok))):
		default:
			out = append(out, "cites "+tok+", which is no path of the repository: state the rule, cite its public source or a docs/ page")
		}
	}
	prose := urlRE.ReplaceAllString(line, "")
	prose = mdLinkTarget.ReplaceAllString(prose, "]()")
	prose = inlineCodeSpan.ReplaceAllString(prose, "``")
	for _, m := range issueNum.FindAllStringIndex(prose, -1) {
		before := prose[:m[0]]
		num := prose[m[0]:m[1]]
		switch {
		case ownerRepoTight.MatchString(before), ownerRepoWord.MatchString(before):
		case issueBefore.MatchString(before): // reported once, as "issue N" below
		case strings.HasSuffix(before, "&"): // an HTML entity: &#39;
		case hexColor.MatchString(num) && colorCtx.MatchString(prose):
		case len(before) > 0 && isWordByte(before[len(before)-1]): // C#1, x#2
		default:
			out = append(out, "bare "+num+": name the repository (owner/repo#N), or state the rule instead of this project's issue number")
		}
	}
	for _, m := range issueWord.FindAllStringIndex(prose, -1) {
		if !ownerRepoSpace.MatchString(prose[:m[0]]) {
			out = append(out, "\""+prose[m[0]:m[1]]+"\" without owner/repo: name the repository, or state the rule instead of this project's issue number")
		}
	}
	return out
}

func isWordByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// inlineCodeSpan matches a Markdown code span.
var inlineCodeSpan = regexp.MustCompile("`[^`]*`")

// markdownProse returns the lines of a Markdown file outside fenced code
// blocks, numbered from 1. citeProblems blanks code spans for the
// issue-number checks only (a page name inside backticks is still a citation).
func markdownProse(b []byte) (lines []string, nums []int) {
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
		lines, nums = append(lines, line), append(nums, i+1)
	}
	return lines, nums
}

// citeFiles lists what TestCitationsResolve reads: every .go file of the
// module (its comments), docs/*.md and every README.md, outside hidden
// directories and bin/; .go files under testdata/ and results/ are data.
func citeFiles(t *testing.T, root string) (goFiles, mdFiles []string) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		switch {
		case strings.HasSuffix(name, ".go") && !strings.Contains("/"+rel, "/testdata/") && !strings.HasPrefix(rel, "results/"):
			goFiles = append(goFiles, p)
		case name == "README.md", strings.HasPrefix(rel, "docs/") && strings.Count(rel, "/") == 1 && strings.HasSuffix(name, ".md"):
			mdFiles = append(mdFiles, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return goFiles, mdFiles
}

// TestCitationsResolve checks every comment of the module's .go files and the
// prose of docs/*.md and every README.md (fenced code blocks aside) with
// citeProblems.
func TestCitationsResolve(t *testing.T) {
	root := repoRoot
	goFiles, mdFiles := citeFiles(t, root)
	if len(goFiles) < 100 || len(mdFiles) < 5 {
		t.Fatalf("%d .go and %d Markdown files found: the walk is broken", len(goFiles), len(mdFiles))
	}
	report := func(path string, line int, text string) {
		rel, _ := filepath.Rel(root, path)
		for _, p := range citeProblems(root, text) {
			t.Errorf("%s:%d: %s", filepath.ToSlash(rel), line, p)
		}
	}
	fset := token.NewFileSet()
	for _, p := range goFiles {
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				first := fset.Position(c.Slash).Line
				for i, text := range strings.Split(c.Text, "\n") {
					report(p, first+i, text)
				}
			}
		}
	}
	for _, p := range mdFiles {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		lines, nums := markdownProse(b)
		for i, text := range lines {
			report(p, nums[i], text)
		}
	}
	t.Logf("%d .go files' comments and %d Markdown files checked", len(goFiles), len(mdFiles))
}

// TestCitePatterns pins what citeProblems flags and what it leaves alone.
func TestCitePatterns(t *testing.T) {
	bad := []string{
		"// the first scrape fails the run (peers.md case 13).",
		"(peers.md router case 4)",
		"score every input (signals.md)",
		"`signals.md` scores each input",
		"the reference client (brief workload.md)",
		"Claude Code gives up after 5 minutes (brief clients.md)",
		"shared/brief/workload.md, a figure",
		"the brief's 7-GPU anecdote",
		"(workload.md: 4 sessions 56.2 -> 86.4)",
		"Issue 24: a decode error",
		"issue #19 item 4",
		"(issues 24 and 25)",
		"after the #16 changes",
		"vLLM PR #28792",
		"(PR #1582: 2-3 us per token)",
		"Dynamo #14570 filled its table",
		"// Peers case 10: vLLM's first chunk is role-only",
		"// Peers cases 2 and 9 on both APIs",
		"a tokenizer slower than the benchmark's (PR #1582's 2-3 us, and prefill",
	}
	good := []string{
		"vllm-project/vllm#51349 measured it",
		"vllm-project/vllm PR #32525, merged 2026-01-17",
		"vllm-project/vllm issue #25301 asks for a pool",
		"ai-dynamo/dynamo#8144 and ai-dynamo/dynamo#9755",
		"### 4. What each placement input says",
		"## 10. Proxy overhead",
		"see [section 10](router.md#10-proxy-overhead)",
		"https://github.com/vllm-project/vllm/pull/51349#issuecomment-3",
		"the line colour is #1f77b4; the grid #333333 (CSS fill)",
		"&#39; is an apostrophe",
		"C#1 is no issue",
		"results/study/signals.md: what each input said",
		"<out>/signals.md, written by warden study",
		"docs/measurements.md, \"Failure cases the harness guards against\"",
		"held briefly by another listener",
		"a system prompt that says be brief",
		"vllm/v1/core/sched/scheduler.py",
		"docs/bench.md, failure case 4: a missing series is not zero",
		"the peers' retry-before-the-first-byte rule",
	}
	root := repoRoot
	for _, s := range bad {
		if len(citeProblems(root, s)) == 0 {
			t.Errorf("citeProblems(%q) = none, want a problem", s)
		}
	}
	for _, s := range good {
		if p := citeProblems(root, s); len(p) != 0 {
			t.Errorf("citeProblems(%q) = %q, want none", s, p)
		}
	}
}
