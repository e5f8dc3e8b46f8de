package losscheck

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps package losscheck to the standard library: the
// chart's module imports it too.
func TestDependencies(t *testing.T) {
	depcheck.StdlibOnly(t, ".", "github.com/fieldwatch/fieldwatch/internal/losscheck")
}
