package repocheck

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// ruleBase is the last commit made before the commit message rule: the
// commits after it are checked, those before are history as it is.
const ruleBase = "be25c528e87c556245cde3308ca32f0c7b4116b7"

// maxSubject is the longest subject line, in characters.
const maxSubject = 72

// messageProblems returns what is wrong with a commit message, as git
// stores it: its first line is the subject.
func messageProblems(msg string) []string {
	lines := strings.Split(strings.TrimRight(msg, "\n"), "\n")
	subject := lines[0]
	var problems []string
	switch n := utf8.RuneCountInString(subject); {
	case strings.TrimSpace(subject) == "":
		problems = append(problems, "the subject line is empty")
	case n > maxSubject:
		problems = append(problems, "the subject has "+strconv.Itoa(n)+" characters, at most 72")
	}
	if len(lines) > 1 && strings.TrimSpace(lines[1]) != "" {
		problems = append(problems, "the second line is not blank")
	}
	return problems
}

var messageCases = []struct {
	name, msg string
	ok        bool
}{
	{"subject only", "watcher: bound the queue\n", true},
	{"subject and body", "watcher: bound the queue\n\nWhy, and the figures.\n", true},
	{"72 characters", "action: " + strings.Repeat("x", 64) + "\n", true},
	{"72 characters, not bytes", "action: µs " + strings.Repeat("x", 61) + "\n", true},
	{"73 characters", "action: " + strings.Repeat("x", 65) + "\n", false},
	{"no blank line", "action: retry\nbody straight after\n", false},
	{"empty", "\n", false},
}

// TestMessageProblems checks the check on messages of each kind.
func TestMessageProblems(t *testing.T) {
	for _, tt := range messageCases {
		t.Run(tt.name, func(t *testing.T) {
			if got := messageProblems(tt.msg); (len(got) == 0) != tt.ok {
				t.Errorf("messageProblems(%q) = %q, want ok %v", tt.msg, got, tt.ok)
			}
		})
	}
}

// TestHookAgrees runs .githooks/commit-msg on the same messages: the hook
// refuses before a commit what TestCommitMessages fails after it.
func TestHookAgrees(t *testing.T) {
	hook, err := filepath.Abs("../../.githooks/commit-msg")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range messageCases {
		if strings.TrimSpace(tt.msg) == "" {
			continue // git refuses an empty message before the hook
		}
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "COMMIT_EDITMSG")
			if err := os.WriteFile(file, []byte("# a comment git strips\n"+tt.msg), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(hook, file).CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("run %s: %v", hook, err)
			}
			if (err == nil) != tt.ok {
				t.Errorf("the hook on %q: %v, want ok %v\n%s", tt.msg, err, tt.ok, out)
			}
		})
	}
}

// TestCommitMessages checks the message of every commit after ruleBase
// that is not a merge. A shallow clone without ruleBase checks the
// commits it has; a tree outside git fails: its history cannot be read.
func TestCommitMessages(t *testing.T) {
	if out, err := git("rev-parse", "--is-inside-work-tree"); err != nil || strings.TrimSpace(out) != "true" {
		t.Fatalf("not a git checkout, so the commit messages cannot be checked: run the tests in a clone (git rev-parse: %v %s)", err, out)
	}
	revs := ruleBase + "..HEAD"
	if _, err := git("cat-file", "-e", ruleBase+"^{commit}"); err != nil {
		shallow, _ := git("rev-parse", "--is-shallow-repository")
		if strings.TrimSpace(shallow) != "true" {
			t.Fatalf("commit %s, where the rule starts, is not in this clone: fetch it (git fetch origin %s)", ruleBase, ruleBase)
		}
		t.Logf("a shallow clone without %s: checking the commits it has", ruleBase[:12])
		revs = "HEAD"
	}
	out, err := git("log", "--no-merges", "--format=%H%x00%B%x1e", revs)
	if err != nil {
		t.Fatalf("git log %s: %v\n%s", revs, err, out)
	}
	n := 0
	for rec := range strings.SplitSeq(out, "\x1e") {
		hash, msg, ok := strings.Cut(strings.TrimLeft(rec, "\n"), "\x00")
		if !ok {
			continue
		}
		n++
		subject, _, _ := strings.Cut(msg, "\n")
		for _, p := range messageProblems(msg) {
			t.Errorf("commit %.12s %q: %s", hash, subject, p)
		}
	}
	t.Logf("%d commits checked (%s)", n, revs)
}

// git runs git with args in the test's directory and returns its output.
func git(args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command("git", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
