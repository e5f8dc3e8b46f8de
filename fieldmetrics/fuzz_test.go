package fieldmetrics

import (
	"testing"
)

// FuzzParse holds the loader and the evaluators to any input: a
// configuration either loads or is refused with errors, never a panic,
// and what loads evaluates on the kube-state-metrics fixture without one.
func FuzzParse(f *testing.F) {
	f.Add([]byte(widgetCRS))
	f.Add([]byte(benchCRS))
	f.Add([]byte(`spec: {resources: [{groupVersionKind: {group: a.io}, labelsFromPath: {"*": [metadata, labels]}, metrics: [{name: x, each: {type: Gauge, gauge: {path: [status, "[type=Ready]", "-1"], labelFromKey: k, valueFrom: [a]}}}]}]}`))
	f.Add([]byte(`spec: {resources: [{groupVersionKind: {group: a.io}, metrics: [{name: x, each: {type: StateSet, stateSet: {path: [status], valueFrom: [phase], labelName: p, list: [a, b]}}}]}]}`))
	f.Add([]byte(`spec: {resources: [{groupVersionKind: {group: a.io}, metrics: [{name: x, each: {type: info, info: {path: [status, sub], labelFromKey: k, labelsFromPath: {"p_*": [x]}}}}]}]}`))
	res := widgets
	res.Group, res.Kind = "a.io", "A"
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		set.Series(widgets, cr)
		set.Series(res, cr)
		_ = set.Projection(res)
	})
}
