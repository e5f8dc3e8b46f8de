package payloadtest

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps payloadtest what doc.go says: package payload
// (and what it imports) and the standard library, so that any package's
// tests can use it.
func TestDependencies(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.CheckExcept(t, ".", module+"internal/payloadtest", []string{module + "payload", module + "change"},
		"k8s.io/", "sigs.k8s.io/", module)
}
