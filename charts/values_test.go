package charts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The values table of the chart's README lies between these markers.
const (
	tableBegin = "<!-- values table: generated from values.yaml by charts/values_test.go (go test -update) -->\n"
	tableEnd   = "<!-- end of the values table -->\n"
)

// valueRow is one documented value of values.yaml.
type valueRow struct {
	key, typ, def, doc string
}

// documentedValues walks values.yaml: every key whose head comment starts
// with "# --" is a row (a documented map is one row, its keys its
// default); a key without one must be a map whose keys are documented.
func documentedValues(t *testing.T, data []byte) []valueRow {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var rows []valueRow
	var walk func(prefix string, m *yaml.Node)
	walk = func(prefix string, m *yaml.Node) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			key := prefix + k.Value
			text, documented := docComment(k.HeadComment)
			switch {
			case documented:
				rows = append(rows, valueRow{key: key, typ: typeOf(v), def: defaultOf(t, v), doc: text})
			case v.Kind == yaml.MappingNode && len(v.Content) > 0:
				walk(key+".", v)
			default:
				t.Errorf("values.yaml: %s (line %d) has no \"# --\" comment", key, k.Line)
			}
		}
	}
	walk("", doc.Content[0])
	return rows
}

// docComment returns the text of a "# --" comment: the last paragraph of
// the key's head comment, when it starts with "# --".
func docComment(head string) (string, bool) {
	paragraphs := strings.Split(head, "\n\n")
	last := paragraphs[len(paragraphs)-1]
	if !strings.HasPrefix(last, "# --") {
		return "", false
	}
	var words []string
	for i, line := range strings.Split(last, "\n") {
		if i == 0 {
			line = strings.TrimPrefix(line, "# --")
		}
		words = append(words, strings.TrimSpace(strings.TrimPrefix(line, "#")))
	}
	return strings.TrimSpace(strings.Join(words, " ")), true
}

// typeOf names a value's type as the table shows it.
func typeOf(v *yaml.Node) string {
	switch v.Kind {
	case yaml.MappingNode:
		return "object"
	case yaml.SequenceNode:
		return "list"
	}
	switch v.Tag {
	case "!!bool":
		return "bool"
	case "!!int":
		return "int"
	case "!!float":
		return "number"
	}
	return "string"
}

// defaultOf renders a value's default as compact JSON (a multi-line string
// is named, not shown).
func defaultOf(t *testing.T, v *yaml.Node) string {
	t.Helper()
	if v.Kind == yaml.ScalarNode && strings.Contains(v.Value, "\n") {
		return "(see values.yaml)"
	}
	var val any
	if err := v.Decode(&val); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(val)
	if err != nil {
		t.Fatal(err)
	}
	return "`" + string(b) + "`"
}

// valuesTable renders the rows as a Markdown table.
func valuesTable(rows []valueRow) string {
	var b strings.Builder
	b.WriteString("| value | type | default | description |\n|---|---|---|---|\n")
	for _, r := range rows {
		cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.key, r.typ, cell(r.def), cell(r.doc))
	}
	return b.String()
}

// TestValuesTable: every value of values.yaml is documented, and the
// README's values table is the one generated from it (go test -update
// rewrites it).
func TestValuesTable(t *testing.T) {
	values, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rows := documentedValues(t, values)
	if len(rows) < 40 {
		t.Errorf("%d documented values: the walk missed some", len(rows))
	}
	readmePath := filepath.Join(chartDir, "README.md")
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := bytes.Index(readme, []byte(tableBegin)), bytes.Index(readme, []byte(tableEnd))
	if begin < 0 || end < begin {
		t.Fatalf("%s lacks the markers of the values table", readmePath)
	}
	table := valuesTable(rows)
	current := string(readme[begin+len(tableBegin) : end])
	if current == table {
		return
	}
	if *update {
		out := string(readme[:begin+len(tableBegin)]) + table + string(readme[end:])
		if err := os.WriteFile(readmePath, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the values table of %s is not values.yaml's (go test -update rewrites it):\n%s", readmePath, lineDiff(current, table))
}
