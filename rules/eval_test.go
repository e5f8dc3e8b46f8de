package rules

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// TestGolden evaluates the cases of testdata/golden/cases.yaml against
// testdata/golden/rules.yaml: each must meet its expectations, and the
// payloads must equal testdata/golden/<case>.json byte for byte (key order
// included).
func TestGolden(t *testing.T) {
	set, err := Load("testdata/golden/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases, err := LoadCases("testdata/golden/cases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range RunCases(set, cases) {
		t.Run(res.Name, func(t *testing.T) {
			if !res.Pass {
				t.Errorf("expectations failed:\n%s", res.Diff)
			}
			got := goldenJSON(t, res)
			file := filepath.Join("testdata/golden", slug(cases[i].Name)+".json")
			if *update {
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("payloads differ from %s (run with -update to accept):\n%s", file, lineDiff(strings.Split(string(want), "\n"), strings.Split(string(got), "\n")))
			}
		})
	}
}

// goldenJSON renders a result's payloads (indented, keys in payload order)
// and errors.
func goldenJSON(t *testing.T, res CaseResult) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(`{"firings":[`)
	for i, f := range res.Firings {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(f)
	}
	b.WriteString(`],"errors":`)
	errs, _ := json.Marshal(append([]string{}, res.Errors...))
	b.Write(errs)
	b.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		t.Fatalf("payloads are not JSON: %v\n%s", err, b.Bytes())
	}
	out.WriteByte('\n')
	return out.Bytes()
}

func slug(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(s))
}

// TestPayloadShape checks the payload contract independently of the golden
// files: keys and their order, the id, the time format.
func TestPayloadShape(t *testing.T) {
	set, err := Parse("f.yaml", []byte(rule(match+"    includeObject: true\n"+logAction)))
	if err != nil {
		t.Fatal(err)
	}
	old := obj(t, `{"metadata":{"name":"w","namespace":"ns","uid":"u","resourceVersion":"1","managedFields":[{"manager":"m","operation":"Update","time":"2026-01-01T00:00:00Z"}]},"spec":{"size":1}}`)
	new := obj(t, `{"metadata":{"name":"w","namespace":"ns","uid":"u","resourceVersion":"2","managedFields":[{"manager":"m","operation":"Update","time":"2026-01-01T00:00:01Z"}]},"spec":{"size":2}}`)
	c := &Change{Type: change.Updated, Resource: widgetsV1, Object: new, OldObject: old, Time: time.Date(2026, 12, 2, 13, 0, 0, 5000, time.FixedZone("x", 3600))}
	firings, errs := set.Eval(c)
	if len(firings) != 1 || len(errs) != 0 {
		t.Fatalf("Eval = %v, %v", firings, errs)
	}
	f := firings[0]
	if f.ID != "u/2/r" || f.Rule != set.Rule("r") {
		t.Errorf("firing = %+v", f)
	}
	wantRef := ObjectRef{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespace: "ns", Name: "w", UID: "u", ResourceVersion: "2"}
	if f.Object != wantRef {
		t.Errorf("object ref = %+v", f.Object)
	}
	dec := json.NewDecoder(bytes.NewReader(f.Payload))
	var keys []string
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			continue
		case json.Delim('}'), json.Delim(']'):
			depth--
			continue
		}
		if s, ok := tok.(string); ok && depth == 1 && dec.More() {
			keys = append(keys, s)
			// skip the value
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := []string{"id", "time", "rule", "type", "resource", "namespace", "name", "uid", "resourceVersion", "changes", "actor", "object", "oldObject"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("payload keys = %v, want %v", keys, want)
	}
	var p map[string]any
	if err := json.Unmarshal(f.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p["time"] != "2026-12-02T12:00:00.000005Z" || p["id"] != "u/2/r" || p["type"] != "updated" {
		t.Errorf("payload = %s", f.Payload)
	}
}

func TestEvalBadChanges(t *testing.T) {
	set, err := Parse("f.yaml", []byte(rule(match+logAction)))
	if err != nil {
		t.Fatal(err)
	}
	o := obj(t, `{"metadata":{"name":"w"}}`)
	for _, c := range []*Change{
		{Type: "moved", Resource: widgetsV1, Object: o, OldObject: o},
		{Type: change.Created, Resource: widgetsV1},
		{Type: change.Updated, Resource: widgetsV1, Object: o},
		{Type: change.Deleted, Resource: widgetsV1, Object: o},
	} {
		if f, errs := set.Eval(c); len(f) != 0 || len(errs) != 1 {
			t.Errorf("Eval(%s) = %v, %v; want one error", c.Type, f, errs)
		}
	}
	// A resource no rule watches is not even checked.
	if f, errs := set.Eval(&Change{Type: "moved", Resource: pods}); f != nil || errs != nil {
		t.Errorf("Eval of an unwatched resource = %v, %v", f, errs)
	}
}

// TestEvalConcurrentNoMutation evaluates the same change from many
// goroutines (run with -race) and checks that the input objects are not
// changed, redaction included.
func TestEvalConcurrentNoMutation(t *testing.T) {
	set, err := Load("testdata/golden/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases, err := LoadCases("testdata/golden/cases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	snapshots := make([]string, len(cases))
	for i, c := range cases {
		b, _ := json.Marshal([]any{c.Change.OldObject, c.Change.Object})
		snapshots[i] = string(b)
	}
	want := make([][]Firing, len(cases))
	for i := range cases {
		want[i], _ = set.Eval(&cases[i].Change)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 8*len(cases))
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range len(cases) {
				i := (n + g) % len(cases)
				got, _ := set.Eval(&cases[i].Change)
				if len(got) != len(want[i]) {
					errc <- fmt.Errorf("case %s: %d firings, want %d", cases[i].Name, len(got), len(want[i]))
					continue
				}
				for j := range got {
					if !bytes.Equal(got[j].Payload, want[i][j].Payload) {
						errc <- fmt.Errorf("case %s: payload %d differs between runs", cases[i].Name, j)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	for i, c := range cases {
		b, _ := json.Marshal([]any{c.Change.OldObject, c.Change.Object})
		if string(b) != snapshots[i] {
			t.Errorf("case %s: Eval changed the input objects", c.Name)
		}
	}
}
