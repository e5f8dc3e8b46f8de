// Package lint holds tests that keep the whole tree to conventions that
// neither go vet nor golangci-lint's configuration (.golangci.yml) can
// check. It has no code: its tests read the tree's Go files, and
// `go test ./internal/lint` runs them.
//
// TestLogErrorKey: a log record's error is under the key "error", never
// "err", so that one query finds every error of every package. sloglint
// (forbidden-keys) holds log calls and their attributes to it; this test
// holds the key-value arguments of slog.Group, which sloglint does not
// read.
package lint
