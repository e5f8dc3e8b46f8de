package crdimpact

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestNoClientGo keeps crdimpact free of k8s.io/client-go, the watcher and
// fieldwatch's internal packages (doc.go).
func TestNoClientGo(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.Check(t, ".", module+"rules/crdimpact", "k8s.io/client-go", module+"watcher", module+"internal")
}
