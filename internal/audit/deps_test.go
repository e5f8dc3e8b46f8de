package audit

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps package audit what doc.go says: it works on plain
// values and package change, so it imports neither the watcher, nor the
// rules and their actions, nor the app, nor client-go.
func TestDependencies(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	banned := []string{"k8s.io/client-go", module + "watcher", module + "rules", module + "internal/app", module + "internal/testenv"}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not in PATH: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, b := range banned {
			if strings.HasPrefix(dep, b) {
				t.Errorf("audit depends on %s", dep)
			}
		}
	}
}
