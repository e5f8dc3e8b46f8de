package watcher

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps package watcher what doc.go says: of fieldwatch
// it imports package change, internal/jsonscan and its own
// internal/watchstream only, never the rules, the actions or the command's
// wiring.
func TestDependencies(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.CheckExcept(t, ".", module+"watcher", []string{module + "change", module + "internal/jsonscan", module + "watcher/internal/watchstream"}, module)
}
