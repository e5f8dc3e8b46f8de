package rules

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// TestSecretLastAppliedRedacted checks that kubectl's last-applied copy of
// a Secret, which holds its stringData in plain text and its data in
// base64, never reaches a payload: not in object or oldObject, nor in a
// change at the annotation, of the annotations map or of the whole
// metadata.
func TestSecretLastAppliedRedacted(t *testing.T) {
	const plain = "hunter2-s3cr3t-value"
	b64 := base64.StdEncoding.EncodeToString([]byte(plain))
	lastApplied := func(v string) string {
		return `{"apiVersion":"v1","data":{"token":"` + b64 + `"},"kind":"Secret","metadata":{"annotations":{},"name":"db","namespace":"shop"},"stringData":{"password":"` + v + `"}}`
	}
	secret := func(rv string, annotations map[string]any) map[string]any {
		meta := map[string]any{"name": "db", "namespace": "shop", "uid": "u1", "resourceVersion": rv}
		if annotations != nil {
			meta["annotations"] = annotations
		}
		return map[string]any{
			"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": meta,
			"data": map[string]any{"password": base64.StdEncoding.EncodeToString([]byte(plain + "-2")), "token": b64},
		}
	}
	applied := func(rv, v string) map[string]any {
		return secret(rv, map[string]any{lastAppliedAnnotation: lastApplied(v), "team": "shop"})
	}
	noMeta := secret("1", nil)
	delete(noMeta, "metadata")

	const rules = `rules:
  - name: whole-object
    match: {resources: [{group: "", resource: secrets}]}
    includeObject: true
    actions: [{log: {}}]
  - name: no-fields
    match: {resources: [{group: "", resource: secrets}]}
    actions: [{log: {}}]
  - name: annotation
    match: {resources: [{group: "", resource: secrets}]}
    fields: ['metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"]']
    actions: [{log: {}}]
  - name: annotations
    match: {resources: [{group: "", resource: secrets}]}
    fields: [metadata.annotations]
    actions: [{log: {}}]
  - name: metadata
    match: {resources: [{group: "", resource: secrets}]}
    fields: [metadata]
    actions: [{log: {}}]
`
	set, err := Parse("secrets.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	secrets := change.Resource{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true, Preferred: true}
	tests := []struct {
		name     string
		typ      change.Type
		old, new map[string]any
		fire     int // how many rules fire
	}{
		{"created by kubectl apply", change.Created, nil, applied("1", plain), 5},
		{"the annotation changes", change.Updated, applied("1", plain), applied("2", plain+"-new"), 5},
		{"the first apply adds the annotations", change.Updated, secret("1", nil), applied("2", plain), 5},
		{"the annotations are removed", change.Updated, applied("1", plain), secret("2", nil), 5},
		{"the whole metadata appears", change.Updated, noMeta, applied("2", plain), 5},
		{"the whole metadata goes", change.Updated, applied("1", plain), noMeta, 5},
		{"only the annotation's value changes", change.Updated, applied("1", plain+"-old"), applied("2", plain), 5},
		{"deleted", change.Deleted, applied("1", plain), nil, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Change{Type: tt.typ, Resource: secrets, New: tt.new, Old: tt.old, Time: time.Unix(0, 0)}
			firings, errs := set.Eval(c)
			if len(errs) > 0 || len(firings) != tt.fire {
				t.Fatalf("Eval: %d firings, errors %v; want %d firings", len(firings), errs, tt.fire)
			}
			redacted := 0
			for _, f := range firings {
				for _, leak := range []string{plain, b64, `\"stringData\"`} {
					if bytes.Contains(f.Payload, []byte(leak)) {
						t.Errorf("%s: payload holds %q:\n%s", f.Rule.Name, leak, f.Payload)
					}
				}
				redacted += bytes.Count(f.Payload, []byte(`"`+lastAppliedAnnotation+`":"<redacted>"`))
			}
			// The annotation's key stays visible, as data keys do.
			if redacted == 0 {
				t.Errorf("no payload shows the annotation redacted")
			}
			// Redaction copies: the input objects keep the copy.
			for _, o := range []map[string]any{tt.old, tt.new} {
				meta, _ := o["metadata"].(map[string]any)
				annotations, _ := meta["annotations"].(map[string]any)
				if v, ok := annotations[lastAppliedAnnotation].(string); ok && !strings.Contains(v, plain) {
					t.Errorf("Eval changed the input: %s", v)
				}
			}
		})
	}

	// Only core Secrets: a custom resource named secrets keeps the copy.
	custom := change.Resource{Group: "example.com", Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true, Preferred: true}
	set, err = Parse("custom.yaml", []byte(strings.ReplaceAll(rules, `group: ""`, "group: example.com")))
	if err != nil {
		t.Fatal(err)
	}
	firings, _ := set.Eval(&Change{Type: change.Created, Resource: custom, New: applied("1", plain)})
	if len(firings) == 0 || !bytes.Contains(firings[0].Payload, []byte(plain)) {
		t.Errorf("a custom resource's annotation was redacted: %v", firings)
	}
}

// TestObserved: a change that is a net effect says how it was seen, after
// its type; one from a watch event says nothing (its payload is as
// before). CEL's observed is "watch" for it.
func TestObserved(t *testing.T) {
	set, err := Parse("observed.yaml", []byte(`rules:
  - name: all
    match: {resources: [{group: "", kind: ConfigMap}]}
    actions: [{log: {}}]
  - name: net-effects
    match: {resources: [{group: "", kind: ConfigMap}]}
    when: observed != "watch"
    actions: [{log: {}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	cm := func(rv, v string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": rv}, "data": map[string]any{"v": v}}
	}
	res := change.Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, Preferred: true}
	for _, tt := range []struct {
		observed change.Observed
		want     string // in the payload, after the type
		fire     int
	}{
		{"", `"type":"updated","resource":`, 1},
		{change.ObservedWatch, `"type":"updated","resource":`, 1},
		{change.ObservedRelist, `"type":"updated","observed":"relist","resource":`, 2},
		{change.ObservedRestart, `"type":"updated","observed":"restart","resource":`, 2},
		{change.ObservedTakeover, `"type":"updated","observed":"takeover","resource":`, 2},
	} {
		firings, errs := set.Eval(&Change{Type: change.Updated, Resource: res, Old: cm("1", "a"), New: cm("2", "b"), Observed: tt.observed})
		if len(errs) > 0 || len(firings) != tt.fire {
			t.Errorf("observed %q: %d firings, errors %v; want %d", tt.observed, len(firings), errs, tt.fire)
			continue
		}
		if !bytes.Contains(firings[0].Payload, []byte(tt.want)) {
			t.Errorf("observed %q: payload %s, want %s in it", tt.observed, firings[0].Payload, tt.want)
		}
	}
}
