package fieldpath

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps package fieldpath to the standard library
// (doc.go): crd/diff and crd/impact use it and nothing else of fieldwatch.
func TestDependencies(t *testing.T) {
	depcheck.StdlibOnly(t, ".", "github.com/fieldwatch/fieldwatch/internal/fieldpath")
}
