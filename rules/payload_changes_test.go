package rules

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/fieldwatch/fieldwatch/change"
)

// TestIgnoredOnly checks that changes of ignored subtrees never fire a
// rule nor show in its changes, the maps that held only them included.
func TestIgnoredOnly(t *testing.T) {
	const rules = `rules:
  - name: audit
    match: {resources: [{group: example.com, kind: Widget}]}
    ignoreFields: &ignored
      - metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]
      - spec.cache
    actions: [{log: {}}]
  - name: annotations
    match: {resources: [{group: example.com, kind: Widget}]}
    fields: [metadata.annotations]
    ignoreFields: *ignored
    actions: [{log: {}}]
  - name: spec
    match: {resources: [{group: example.com, kind: Widget}]}
    fields: [spec]
    ignoreFields: *ignored
    actions: [{log: {}}]
`
	set, err := Parse("ignored.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	const lastApplied = `"kubectl.kubernetes.io/last-applied-configuration":"{\"spec\":{}}"`
	widget := func(rv, annotations, spec string) map[string]any {
		meta := `{"name":"w","namespace":"d","uid":"u","resourceVersion":"` + rv + `"`
		if annotations != "" {
			meta += `,"annotations":` + annotations
		}
		s := `{"apiVersion":"example.com/v1","kind":"Widget","metadata":` + meta + `}`
		if spec != "" {
			s += `,"spec":` + spec
		}
		return obj(t, s+`}`)
	}
	tests := []struct {
		name     string
		typ      change.Type
		old, new map[string]any
		want     map[string]string // rule -> changes
	}{
		{"the first last-applied annotation", change.Updated,
			widget("1", "", `{"size":1}`), widget("2", `{`+lastApplied+`}`, `{"size":1}`), map[string]string{}},
		{"the last-applied annotation and its map removed", change.Updated,
			widget("1", `{`+lastApplied+`}`, `{"size":1}`), widget("2", "", `{"size":1}`), map[string]string{}},
		{"the first last-applied annotation beside another", change.Updated,
			widget("1", "", `{"size":1}`), widget("2", `{`+lastApplied+`,"team":"a"}`, `{"size":1}`), map[string]string{
				"audit":       `[{"op":"add","path":"/metadata/annotations","value":{"team":"a"}}]`,
				"annotations": `[{"op":"add","path":"/metadata/annotations","value":{"team":"a"}}]`,
			}},
		{"a spec of ignored parts only appears", change.Updated,
			widget("1", "", ""), widget("2", "", `{"cache":{"hits":3}}`), map[string]string{}},
		{"a spec of ignored parts only goes", change.Updated,
			widget("1", "", `{"cache":{"hits":3}}`), widget("2", "", ""), map[string]string{}},
		{"a spec appears", change.Updated,
			widget("1", "", ""), widget("2", "", `{"cache":{"hits":3},"size":1}`), map[string]string{
				"audit": `[{"op":"add","path":"/spec","value":{"size":1}}]`,
				"spec":  `[{"op":"add","path":"/spec","value":{"size":1}}]`,
			}},
		// On create and delete a rule with fields fires on what is there;
		// a value of ignored parts only does not show.
		{"created with the last-applied annotation only", change.Created,
			nil, widget("1", `{`+lastApplied+`}`, `{"cache":{"hits":3}}`), map[string]string{
				"audit":       `[]`,
				"annotations": `[]`,
				"spec":        `[]`,
			}},
		{"deleted with the last-applied annotation only", change.Deleted,
			widget("1", `{`+lastApplied+`}`, `{"size":1,"cache":{}}`), nil, map[string]string{
				"audit":       `[]`,
				"annotations": `[]`,
				"spec":        `[{"op":"remove","path":"/spec","oldValue":{"size":1}}]`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			firings, errs := set.Eval(&Change{Type: tt.typ, Resource: widgetsV1, New: tt.new, Old: tt.old})
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			got := map[string]string{}
			for _, f := range firings {
				var p struct{ Changes json.RawMessage }
				if err := json.Unmarshal(f.Payload, &p); err != nil {
					t.Fatal(err)
				}
				got[f.Rule.Name] = string(p.Changes)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("fired with changes\n  %v\nwant\n  %v", got, tt.want)
			}
		})
	}
}
