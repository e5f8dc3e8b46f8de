package payload_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/payloadtest"
)

// docTables maps each heading of docs/payload.md that has a key table to
// where its keys are in a payload.
var docTables = map[string]string{
	"Fields, in this order": "",
	"Resource":              "resource.",
	"Changes":               "changes[].",
	"The user, from the audit stream or admission": "actor.",
	"guard": "guard.",
	"crd":   "crd.",
}

// TestDocsFields keeps docs/payload.md and the type to each other: every
// key path of Payload is in a key table of the page, every key a table
// lists is one of Payload's, and each table lists its keys in the order
// of the type's fields (the order of the payload's keys).
func TestDocsFields(t *testing.T) {
	doc, err := os.ReadFile("../docs/payload.md")
	if err != nil {
		t.Fatal(err)
	}
	typePaths := payloadtest.Paths()
	documented := map[string]bool{}
	for heading, keys := range docKeyTables(t, string(doc)) {
		prefix, ok := docTables[heading]
		if !ok {
			t.Errorf("docs/payload.md: a key table under %q, which TestDocsFields does not place in the payload", heading)
			continue
		}
		for i, k := range keys {
			keys[i] = prefix + k
			documented[keys[i]] = true
		}
		inOrder := slices.DeleteFunc(slices.Clone(typePaths), func(p string) bool { return !slices.Contains(keys, p) })
		if !slices.Equal(slices.Compact(slices.Clone(keys)), inOrder) {
			t.Errorf("docs/payload.md, %s: keys in the order %v, the type's is %v", heading, keys, inOrder)
		}
	}
	for _, p := range typePaths {
		if !documented[p] {
			t.Errorf("docs/payload.md does not document %s", p)
		}
		delete(documented, p)
	}
	for p := range documented {
		t.Errorf("docs/payload.md documents %s, which payload.Payload does not have", p)
	}
}

// docKeyTables returns, by the heading above it, the keys of every table
// of doc whose first column is "key": the backquoted names of each row's
// first cell, a name starting with a dot taken under the parent of the
// row's first one (`user.username`, `.uid` is user.username, user.uid).
func docKeyTables(t *testing.T, doc string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	heading, inKeyTable := "", false
	name := regexp.MustCompile("`([^`]+)`")
	for line := range strings.Lines(doc) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "#"):
			heading, inKeyTable = strings.TrimSpace(strings.TrimLeft(line, "#")), false
		case strings.HasPrefix(line, "| key |"):
			if _, dup := out[heading]; dup {
				t.Errorf("docs/payload.md: two key tables under %q", heading)
			}
			inKeyTable = true
			out[heading] = []string{}
		case !strings.HasPrefix(line, "|"):
			inKeyTable = false
		case inKeyTable && !strings.HasPrefix(line, "|---"):
			first, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), "|")
			parent := ""
			for i, m := range name.FindAllStringSubmatch(first, -1) {
				k := m[1]
				if i == 0 {
					if j := strings.LastIndexByte(k, '.'); j >= 0 {
						parent = k[:j]
					}
				} else if strings.HasPrefix(k, ".") {
					k = parent + k
				}
				out[heading] = append(out[heading], k)
			}
		}
	}
	return out
}
