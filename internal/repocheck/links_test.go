package repocheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks checks every relative link of README.md and docs/*.md: the
// file or directory it names exists inside the repository and, with a
// #fragment into a Markdown file, that file has the heading.
func TestDocLinks(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{filepath.Join(root, "README.md")}, docs...)
	problems, links := checkLinks(root, files)
	for _, p := range problems {
		t.Error(p)
	}
	if links < len(files) {
		t.Errorf("found %d links in %d files: the link pattern finds nothing", links, len(files))
	}
}

// TestCheckLinksFinds checks the checker on a tree with a link of each
// kind, good and broken.
func TestCheckLinksFinds(t *testing.T) {
	root := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/a.md", "# A page\n\n## Users (`match.users`)\n\n```\n[not](a-link.md)\n```\n")
	write("pkg/doc.go", "package pkg\n")
	write("README.md", "See [a](docs/a.md), [users](docs/a.md#users-matchusers), [pkg](pkg/), "+
		"[doc](pkg/doc.go), [web](https://example.com/x.md), [self](#top), `[code](nowhere.md)`.\n\n# Top\n\n"+
		"Broken: [gone](docs/gone.md), [anchor](docs/a.md#nope), [outside](../elsewhere/x.md), [here](#nope).\n")
	problems, links := checkLinks(root, []string{filepath.Join(root, "README.md"), filepath.Join(root, "docs/a.md")})
	if links != 9 {
		t.Errorf("found %d links, want 9", links)
	}
	var got []string
	for _, p := range problems {
		got = append(got, strings.SplitN(p, ": ", 3)[1])
	}
	want := []string{"docs/gone.md", "docs/a.md#nope", "../elsewhere/x.md", "#nope"}
	if !slices.Equal(got, want) {
		t.Errorf("problems %q, want the links %q", problems, want)
	}
}

// linkPattern finds inline links and images: [text](target "title").
var linkPattern = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// codeSpan is inline code, whose brackets are not links.
var codeSpan = regexp.MustCompile("`[^`]*`")

// checkLinks returns a problem for every relative link of files that does
// not resolve, and how many links it found.
func checkLinks(root string, files []string) (problems []string, links int) {
	anchors := map[string][]string{} // Markdown file -> its heading anchors
	anchorsOf := func(path string) []string {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, _ := os.ReadFile(path)
		anchors[path] = headingAnchors(string(b))
		return anchors[path]
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		rel, _ := filepath.Rel(root, file)
		for i, line := range proseLines(string(b)) {
			for _, m := range linkPattern.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				if why := resolve(root, file, target, anchorsOf); why != "" {
					problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", rel, i+1, target, why))
				}
			}
		}
	}
	return problems, links
}

// resolve says why target, linked from file, does not resolve ("" when it
// does).
func resolve(root, file, target string, anchorsOf func(string) []string) string {
	path, fragment, _ := strings.Cut(target, "#")
	dest := file
	if path != "" {
		if filepath.IsAbs(path) {
			return "an absolute path"
		}
		dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
		if r, err := filepath.Rel(root, dest); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			return "outside the repository"
		}
		if _, err := os.Stat(dest); err != nil {
			return "no such file"
		}
	}
	if fragment == "" || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	if !slices.Contains(anchorsOf(dest), fragment) {
		return "no such heading"
	}
	return ""
}

// proseLines returns the lines of a Markdown text, those of fenced code
// blocks blanked, so that line numbers stay.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	fence := ""
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives a Markdown text's
// headings: lower case, punctuation dropped, spaces as hyphens, a repeated
// one suffixed -1, -2...
func headingAnchors(text string) []string {
	var out []string
	seen := map[string]int{}
	for _, l := range proseLines(text) {
		level := len(l) - len(strings.TrimLeft(l, "#"))
		if level == 0 || level > 6 || !strings.HasPrefix(l[level:], " ") {
			continue
		}
		a := slug(strings.TrimRight(strings.TrimSpace(l[level:]), "#"))
		if n := seen[a]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", a, n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}

// slug is a heading's anchor, as GitHub makes it.
func slug(heading string) string {
	heading = linkPattern.ReplaceAllStringFunc(heading, func(s string) string {
		return s[strings.IndexByte(s, '[')+1 : strings.LastIndex(s, "](")]
	})
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestSlug checks anchors against those GitHub gives the same headings.
func TestSlug(t *testing.T) {
	tests := map[string]string{
		"Users (`match.users`, `match.excludeUsers`)":                "users-matchusers-matchexcludeusers",
		"Offline cases (`fieldwatch test`)":                          "offline-cases-fieldwatch-test",
		"Scale: thousands of CRDs, hundreds of thousands of objects": "scale-thousands-of-crds-hundreds-of-thousands-of-objects",
		"Failover: leader election":                                  "failover-leader-election",
		"The user, from the audit stream":                            "the-user-from-the-audit-stream",
	}
	for heading, want := range tests {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}
