package rules_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/fileerr"
	"github.com/fieldwatch/fieldwatch/rules"
)

// A rules file is parsed and compiled once; each observed change is then
// evaluated against it, and every rule that fires gives a payload.
func Example() {
	set, err := rules.Parse("rules.yaml", []byte(`
rules:
  - name: widget-resized
    match:
      resources: [{group: example.com, kind: Widget}]
    on: [update]
    fields:
      - path: spec.size
    when: "object.spec.size > oldObject.spec.size"
    actions: [{log: {}}]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	widgets := change.Resource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Custom: true, Preferred: true}
	widget := func(rv string, size int) map[string]any {
		return map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "w1", "namespace": "shop", "uid": "6a1f", "resourceVersion": rv},
			"spec":     map[string]any{"size": int64(size)},
		}
	}
	firings, errs := set.Eval(&rules.Change{
		Type:     change.Updated,
		Resource: widgets,
		Old:      widget("4710", 1),
		New:      widget("4711", 3),
		Time:     time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC),
	})
	fmt.Println(len(errs), "errors")
	for _, f := range firings {
		fmt.Println(f.ID)
		fmt.Println(string(f.Payload))
	}
	// Output:
	// 0 errors
	// 6a1f/4711/widget-resized
	// {"id":"6a1f/4711/widget-resized","time":"2026-12-02T12:00:00.000000Z","rule":"widget-resized","type":"updated","resource":{"group":"example.com","version":"v1","resource":"widgets","kind":"Widget"},"namespace":"shop","name":"w1","uid":"6a1f","resourceVersion":"4711","changes":[{"op":"replace","path":"/spec/size","value":3,"oldValue":1}]}
}

// Set.Selectors and Set.Projection tell a watcher what to watch and what
// of each object to keep.
func ExampleSet_Selectors() {
	set, err := rules.Parse("rules.yaml", []byte(`
rules:
  - name: images
    match:
      resources: [{group: apps, kind: Deployment}]
    fields:
      - path: spec.template.spec.containers[*].image
    actions: [{log: {}}]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	deployments := change.Resource{Group: "apps", Version: "v1", Resource: "deployments", Kind: "Deployment", Namespaced: true, Preferred: true}
	fmt.Println(set.Selectors())
	fmt.Println(set.Projection(deployments).Paths)
	// Output:
	// [{apps  Deployment  false}]
	// [[spec template spec containers]]
}

// Every error of a rules file comes back at once, each where it was
// written.
func ExampleParse_errors() {
	_, err := rules.Parse("rules.yaml", []byte(`
rules:
  - name: bad
    match:
      resources: [{kind: ConfigMap}]
    on: [change]
    fields:
      - path: data[
    actions: [{log: {}}]
`))
	var list fileerr.List
	if errors.As(err, &list) {
		for _, e := range list {
			fmt.Println(e)
		}
	}
	// Output:
	// rules.yaml:5:19: rules[0].match.resources[0].group: required ("" for the core group, "*" for any group)
	// rules.yaml:6:10: rules[0].on[0]: "change" is not a change type: use create, update or delete
	// rules.yaml:8:15: rules[0].fields[0].path: invalid path "data[": unterminated "[" at offset 4
}
