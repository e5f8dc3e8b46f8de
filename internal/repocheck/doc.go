// Package repocheck holds tests that keep the repository, beyond its Go
// code, to its rules. It has no code: its tests read git's history and the
// tree's Markdown, and `go test ./internal/repocheck` runs them.
//
// TestCommitMessages: every commit since the rule was set has a subject of
// at most 72 characters and a blank second line, as .githooks/commit-msg
// checks before a commit is made (`make hooks` enables it).
//
// TestDocLinks: every relative link of README.md and docs/*.md names a
// file of the tree and, with a #fragment, a heading of that file.
//
// It imports the standard library only.
package repocheck
