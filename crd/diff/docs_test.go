package diff

import (
	"os"
	"strings"
	"testing"
)

// TestDocsCRDChecks keeps docs/crd-checks.md listing every check: by its
// name, or on one row by its family and suffix (`default-added`,
// `-changed`) or its family alone (`minimum-`).
func TestDocsCRDChecks(t *testing.T) {
	doc, err := os.ReadFile("../../docs/crd-checks.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	for _, name := range CheckNames {
		i := strings.LastIndexByte(name, '-')
		family, suffix := name[:i+1], name[i:]
		found := false
		for _, l := range lines {
			if !strings.HasPrefix(l, "| ") {
				continue
			}
			if strings.Contains(l, "`"+name+"`") || strings.Contains(l, "`"+family+"`") ||
				(strings.Contains(l, "`"+family) && strings.Contains(l, "`"+suffix+"`")) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("docs/crd-checks.md does not list %s", name)
		}
	}
}
