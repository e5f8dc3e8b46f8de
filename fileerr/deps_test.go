package fileerr

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps package fileerr to the standard library (doc.go).
func TestDependencies(t *testing.T) {
	depcheck.StdlibOnly(t, ".", "github.com/fieldwatch/fieldwatch/fileerr")
}
