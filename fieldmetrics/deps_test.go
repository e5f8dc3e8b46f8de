package fieldmetrics

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps fieldmetrics testable on JSON objects alone: no
// client-go, and none of the packages that run fieldwatch.
func TestDependencies(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.Check(t, ".", module+"fieldmetrics", "k8s.io/client-go",
		module+"watcher", module+"rules", module+"action", module+"internal/app")
}
