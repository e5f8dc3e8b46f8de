// Command fieldwatch watches every resource a Kubernetes cluster serves and
// turns the field changes described in a rules file into JSON payloads
// delivered to logs, webhooks, programs, Events and patches.
//
// main only parses flags and wires packages: the logic lives in
// internal/app, watcher, rules and action.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	// The image is the binary on an empty base, without a CA bundle:
	// these roots are used only where the system has none, so that
	// webhooks to public HTTPS endpoints verify in the image too.
	_ "golang.org/x/crypto/x509roots/fallback"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand.
type command struct {
	name, args, help string
	run              func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"run", "--rules FILE [flags]", "watch the cluster and run the rules' actions", runCmd},
		{"validate", "FILE...", "check rules files; errors as FILE:LINE:COL: message", validateCmd},
		{"test", "--rules FILE CASES...", "evaluate offline cases (old/new objects) and check what fires", testCmd},
		{"api-resources", "[flags]", "list what discovery sees, CRD-backed resources marked", apiResourcesCmd},
		{"rbac", "--rules FILE [flags]", "print the least-privilege RBAC for these rules", rbacCmd},
		{"crd-diff", "OLD NEW [--objects DIR] | --cluster NEW", "compare two versions of CRDs, or NEW with the cluster; breaking changes and the objects they hit", crdDiffCmd},
		{"crd-migrate", "CRD [flags]", "rewrite a CRD's objects stored at old versions, then cut status.storedVersions", crdMigrateCmd},
		{"history", "[--server URL | --state-dir DIR] [filters]", "print what fired, newest first, from a running fieldwatch or a state dir", historyCmd},
		{"history pubkey", "--key-file FILE", "print the public key of the history's signing key, for verify --pubkey", historyPubkeyCmd},
		{"history export", "--server URL | --state-dir DIR | --dsn DSN", "write the history's audit trail as JSON Lines, for verify", historyExportCmd},
		{"history verify", "FILE | --state-dir DIR | --dsn DSN [--pubkey KEY]", "check the audit trail offline, an export or a store: altered, deleted, gaps, a cut tail", historyVerifyCmd},
		{"version", "", "print the version", versionCmd},
	}
}

// run dispatches to a subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if len(args) > 1 && c.name == args[0]+" "+args[1] {
			return c.run(ctx, args[2:], stdout, stderr)
		}
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	_, _ = fmt.Fprintf(stderr, "fieldwatch: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	_, _ = fmt.Fprintf(w, "fieldwatch watches every resource a Kubernetes cluster serves and turns the\n")
	_, _ = fmt.Fprintf(w, "field changes described in a rules file into JSON payloads for actions.\n\n")
	_, _ = fmt.Fprintf(w, "Usage:\n")
	for _, c := range commands() {
		_, _ = fmt.Fprintf(w, "  fieldwatch %-16s %-24s %s\n", c.name, c.args, c.help)
	}
	_, _ = fmt.Fprintf(w, "\n`fieldwatch COMMAND -h` shows a command's flags.\n")
}

// untilDone runs f and returns what it returns, or done false as soon as
// ctx ends (SIGINT, SIGTERM) while f still runs: a command busy loading a
// file must still stop on a signal. f is left to the process's exit.
func untilDone[T any](ctx context.Context, f func() T) (v T, done bool) {
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	select {
	case v = <-ch:
		return v, true
	case <-ctx.Done():
		return v, false
	}
}
