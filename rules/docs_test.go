package rules_test

import (
	"os"
	"strings"
	"testing"

	"github.com/fieldwatch/fieldwatch/rules"
)

// TestDocsRulesExample keeps the complete example of docs/rules.md valid.
func TestDocsRulesExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "## A complete example\n\n```yaml\n")
	example, _, closed := strings.Cut(after, "```")
	if !ok || !closed {
		t.Fatal("docs/rules.md has no complete example")
	}
	set, err := rules.Parse("docs/rules.md", []byte(example))
	if err != nil {
		t.Fatalf("the complete example does not load:\n%v", err)
	}
	r := set.Rule("widget-resized")
	if r == nil || len(r.Actions) != 15 {
		t.Fatalf("the complete example has rules %v", set.Rules())
	}
	kinds := map[string]bool{}
	for _, a := range r.Actions {
		kinds[a.Kind()] = true
	}
	if len(kinds) != 12 {
		t.Errorf("the complete example shows actions %v, want all twelve kinds", kinds)
	}
}
