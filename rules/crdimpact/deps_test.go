package crdimpact

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoClientGo keeps crdimpact free of k8s.io/client-go (doc.go).
func TestNoClientGo(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not in PATH: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(pkg, "k8s.io/client-go") || strings.Contains(pkg, "fieldwatch/watcher") || strings.Contains(pkg, "fieldwatch/internal") {
			t.Errorf("crdimpact depends on %s", pkg)
		}
	}
}
