package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/history"
)

// writeKey writes a new signing key to a file and returns the file and
// the key.
func writeKey(t *testing.T) (string, ed25519.PrivateKey) {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, err := history.MarshalPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "signing.pem")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, key
}

// TestHistoryPubkey: the public key printed is the signing key's, as
// verify --pubkey reads it; a missing or wrong file is bad input.
func TestHistoryPubkey(t *testing.T) {
	keyFile, key := writeKey(t)
	code, stdout, stderr := runCLI(t, "history", "pubkey", "--key-file", keyFile)
	if code != 0 || stdout != string(history.MarshalPublicKey(key.Public().(ed25519.PublicKey))) {
		t.Fatalf("exit %d, stdout %q, stderr %q: want the public key's PEM", code, stdout, stderr)
	}
	pubFile := filepath.Join(t.TempDir(), "pub.pem")
	if err := os.WriteFile(pubFile, []byte(stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	runCLICases(t, []cliCase{
		{name: "no key file", args: []string{"history", "pubkey"}, code: 2, stderr: "--key-file FILE is required"},
		{name: "missing file", args: []string{"history", "pubkey", "--key-file", keyFile + ".missing"}, code: 2, stderr: "signing.pem.missing"},
		{name: "a public key", args: []string{"history", "pubkey", "--key-file", pubFile}, code: 2, stderr: "pub.pem: not a PEM block of type PRIVATE KEY"},
	})
}
