package crddiff

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps crddiff to the API types (doc.go): no client-go,
// no apiserver code, nothing of fieldwatch's own.
func TestDependencies(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not in PATH: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Split(string(out), "\n") {
		if pkg == "github.com/fieldwatch/fieldwatch/rules/crddiff" {
			continue
		}
		for _, banned := range []string{"k8s.io/client-go", "k8s.io/apiserver", "k8s.io/apiextensions-apiserver/pkg/apiserver", "github.com/fieldwatch/fieldwatch/"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("crddiff depends on %s", pkg)
			}
		}
	}
}
