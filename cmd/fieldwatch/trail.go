package main

import (
	"context"
	"crypto/ed25519"
	"flag"
	"fmt"
	"io"

	"github.com/fieldwatch/fieldwatch/internal/history"
)

const pubkeyUsage = `usage: fieldwatch history pubkey --key-file FILE

Prints the public key of the Ed25519 key that signs the history's
checkpoints (fieldwatch run --history-signing-key-file), as a PEM block
of type PUBLIC KEY: give it to fieldwatch history verify --pubkey, and
keep it where whoever verifies the trail can trust it (docs/trail.md).

Exit codes: 0 printed; 2 bad input.
`

func historyPubkeyCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fieldwatch history pubkey", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = io.WriteString(stderr, pubkeyUsage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	keyFile := fs.String("key-file", "", "the private key (PEM PKCS #8, as openssl genpkey -algorithm ed25519 writes it)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *keyFile == "" || fs.NArg() > 0 {
		_, _ = fmt.Fprintln(stderr, "fieldwatch history pubkey: --key-file FILE is required and no arguments are taken")
		return 2
	}
	key, err := history.LoadSigningKey(*keyFile)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history pubkey: %v\n", err)
		return 2
	}
	_, _ = stdout.Write(history.MarshalPublicKey(key.Public().(ed25519.PublicKey)))
	return 0
}
