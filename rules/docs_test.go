package rules_test

import (
	"os"
	"reflect"
	"regexp"
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
	if r == nil || len(r.Actions) != 10 {
		t.Fatalf("the complete example has rules %v", set.Rules())
	}
	kinds := map[string]bool{}
	for _, a := range r.Actions {
		kinds[a.Kind()] = true
	}
	if len(kinds) != 7 {
		t.Errorf("the complete example shows actions %v, want all seven kinds", kinds)
	}
}

// TestDocsPayloadFields keeps the field table of docs/payload.md in the
// order payloads have their keys.
func TestDocsPayloadFields(t *testing.T) {
	doc, err := os.ReadFile("../docs/payload.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(doc), "## Fields, in this order")
	table, _, _ = strings.Cut(table, "\n\n## ")
	var keys []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(\\w+)` \\|").FindAllStringSubmatch(table, -1) {
		keys = append(keys, m[1])
	}
	want := []string{"id", "time", "rule", "type", "observed", "resource", "namespace", "name", "uid", "resourceVersion", "changes", "actor", "crd", "object", "oldObject"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("docs/payload.md lists %v, payloads have %v", keys, want)
	}
}
