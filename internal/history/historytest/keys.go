// Package historytest holds what the tests of the history's users share:
// a signing key written where `fieldwatch run --history-signing-key-file`
// and `fieldwatch history pubkey --key-file` read one.
package historytest

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/history"
)

// WriteSigningKey writes a new Ed25519 signing key (PKCS #8 PEM) to a
// file of the test's and returns its path and the key.
func WriteSigningKey(t testing.TB) (string, ed25519.PrivateKey) {
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
