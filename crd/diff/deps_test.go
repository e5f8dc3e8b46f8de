package diff

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps package diff to the API types (doc.go): no client-go,
// no apiserver code, nothing of fieldwatch's own but the path syntax its
// fields are written in and the errors of its manifest readers.
func TestDependencies(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.CheckExcept(t, ".", module+"crd/diff", []string{module + "internal/fieldpath", module + "fileerr"},
		"k8s.io/client-go", "k8s.io/apiserver", "k8s.io/apiextensions-apiserver/pkg/apiserver", module)
}
