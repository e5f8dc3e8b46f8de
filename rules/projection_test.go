package rules

import (
	"reflect"
	"testing"

	"github.com/fieldwatch/fieldwatch/change"
)

func TestProjection(t *testing.T) {
	tests := []struct {
		name  string
		rules string // rule bodies after match; each "- " starts a rule
		want  change.Projection
	}{
		{"no fields: full", logAction, change.Projection{Full: true}},
		{"fields", logAction + "    fields: [spec.size, 'metadata.annotations[\"a.b/c\"]']\n",
			change.Projection{Paths: [][]string{{"metadata", "annotations", "a.b/c"}, {"spec", "size"}}}},
		{"list selectors truncate", logAction + "    fields: ['spec.parts[name=a].count', 'spec.tags[*]', 'status.conditions[0].status']\n",
			change.Projection{Paths: [][]string{{"spec", "parts"}, {"spec", "tags"}, {"status", "conditions"}}}},
		{"nested paths merge", logAction + "    fields: [spec.a.b, spec.a, spec.a.c]\n",
			change.Projection{Paths: [][]string{{"spec", "a"}}}},
		{"includeObject: full", logAction + "    fields: [spec.size]\n    includeObject: true\n", change.Projection{Full: true}},
		{"CEL selections", logAction + "    fields: [spec.size]\n    when: has(object.status.phase) && object.status.phase != oldObject.metadata.labels.x\n",
			change.Projection{Paths: [][]string{{"metadata", "labels", "x"}, {"spec", "size"}, {"status", "phase"}}}},
		{"CEL whole object: full", logAction + "    fields: [spec.size]\n    when: size(object) > 1\n", change.Projection{Full: true}},
		{"redact and ignore keep nothing; redact hashes", logAction + "    fields: [spec.size]\n    redact: [spec.password, 'spec.env[name=TOKEN].value', 'spec.env[*].valueFrom']\n    ignoreFields: [status]\n",
			change.Projection{Paths: [][]string{{"spec", "size"}}, Hashed: [][]string{{"spec", "env", "*", "value"}, {"spec", "env", "*", "valueFrom"}, {"spec", "password"}}}},
		{"redact with a whole object", logAction + "    redact: [spec.password]\n",
			change.Projection{Full: true, Hashed: [][]string{{"spec", "password"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Parse("f.yaml", []byte(rule(match+tt.rules)))
			if err != nil {
				t.Fatal(err)
			}
			if got := set.Projection(widgetsV1); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("change.Projection = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSetProjectionUnion(t *testing.T) {
	set, err := Parse("f.yaml", []byte(`rules:
  - name: a
    match: {resources: [{group: example.com, kind: Widget}]}
    fields: [spec.size]
    actions: [{log: {}}]
  - name: b
    match: {resources: [{group: example.com, kind: "*"}]}
    fields: [status.phase, spec.size]
    actions: [{log: {}}]
  - name: c
    match: {resources: [{group: "", kind: Pod}]}
    actions: [{log: {}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := set.Projection(widgetsV1), (change.Projection{Paths: [][]string{{"spec", "size"}, {"status", "phase"}}}); !reflect.DeepEqual(got, want) {
		t.Errorf("widgets: %+v, want %+v", got, want)
	}
	if got := set.Projection(gadgets); !reflect.DeepEqual(got.Paths, [][]string{{"spec", "size"}, {"status", "phase"}}) || got.Full {
		t.Errorf("gadgets: %+v", got)
	}
	if got := set.Projection(pods); !got.Full {
		t.Errorf("pods: %+v, want full", got)
	}
	if got := set.Projection(nodes); got.Full || got.Paths != nil {
		t.Errorf("nodes (no rule): %+v, want empty", got)
	}
	if s := set.Projection(widgetsV1).String(); s != "spec.size,status.phase" {
		t.Errorf("String = %q", s)
	}
}

// TestSecretProjectionHashes: the values of Secrets that payloads redact
// are Hashed, whatever the rules keep; a Secret no rule matches keeps and
// hashes nothing.
func TestSecretProjectionHashes(t *testing.T) {
	set, err := Parse("f.yaml", []byte(`rules:
  - name: s
    match: {resources: [{group: "", kind: Secret}], namespaces: [a]}
    fields: [data]
    actions: [{log: {}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	secrets := change.Resource{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true, Preferred: true}
	want := change.Projection{Paths: [][]string{{"data"}}, Hashed: [][]string{
		{"data", "*"}, {"metadata", "annotations", lastAppliedAnnotation}, {"stringData", "*"}}}
	if got := set.Projection(secrets); !reflect.DeepEqual(got, want) {
		t.Errorf("secrets: %+v, want %+v", got, want)
	}
	if got := set.Projection(pods); got.Full || got.Paths != nil || got.Hashed != nil {
		t.Errorf("pods (no rule): %+v, want empty", got)
	}
}
