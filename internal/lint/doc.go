// Package lint holds tests that keep the whole tree to conventions go vet
// does not check. It has no code: its tests read the tree's Go files, and
// `go test ./internal/lint` runs them.
//
// TestLogErrorKey: a log record's error is under the key "error", never
// "err", so that one query finds every error of every package.
package lint
