package fieldmetrics

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// cr is kube-state-metrics' fixture of pkg/customresourcestate's tests
// (registry_factory_test.go), decoded the same way.
var cr = func() map[string]any {
	var m map[string]any
	err := json.Unmarshal([]byte(`{
	"spec": {"replicas": 1, "version": "v0.0.0", "order": [{"id": 1, "value": true}, {"id": 3, "value": false}]},
	"status": {
		"active": {"type-a": 1, "type-b": 3},
		"phase": "foo",
		"sub": {"type-a": {"active": 1, "ready": 2}, "type-b": {"active": 3, "ready": 4}},
		"uptime": 43.21,
		"quantity_milli": "250m",
		"quantity_binarySI": "5Gi",
		"percentage": "28%",
		"condition_values": [{"name": "a", "value": 45}, {"name": "b", "value": 66}],
		"conditions": [{"type": "Ready", "status": "True"}, {"type": "Provisioned", "status": "False"}]
	},
	"metadata": {
		"name": "foo",
		"labels": {"foo": "bar"},
		"annotations": {"qux": "quxx", "bar": "baz"},
		"percentage": "39%",
		"creationTimestamp": "2022-06-28T00:00:00Z"
	}}`), &m)
	if err != nil {
		panic(err)
	}
	return m
}()

// evalEach compiles one each and evaluates it on obj as a family does
// (without base labels): its series as "value label=value,..." sorted, and
// its errors.
func evalEach(t *testing.T, m Metric, obj map[string]any) (series, errs []string) {
	t.Helper()
	prefix := ""
	set, err := Compile(Spec{Resources: []Resource{{
		GroupVersionKind: GroupVersionKind{Group: "myteam.io", Version: "v1", Kind: "Foo"},
		MetricNamePrefix: &prefix,
		Metrics:          []Generator{{Name: "m", Each: m}},
	}}}, true)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	each := set.resources[0].families[0].each
	var out evalOut
	each.values(each.eachPath().Get(obj), &out)
	for _, sr := range out.series {
		var ls []string
		for _, l := range out.labels[sr.start:sr.end] {
			name := l.literal
			if l.name >= 0 {
				name = set.names[l.name]
			}
			ls = append(ls, name+"="+l.value)
		}
		slices.Sort(ls)
		series = append(series, fmt.Sprintf("%v %s", sr.value, strings.Join(ls, ",")))
	}
	slices.Sort(series)
	for _, e := range out.errs {
		errs = append(errs, e.Error())
	}
	return series, errs
}

// TestValues holds the evaluators to kube-state-metrics' own expectations
// (its Test_values, case for case).
func TestValues(t *testing.T) {
	p := func(parts ...string) []string { return parts }
	tests := []struct {
		name       string
		each       Metric
		want, errs []string
	}{
		{"single", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("spec", "replicas")}}, []string{"1 "}, nil},
		{"obj", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("status", "active"), LabelFromKey: "type"}},
			[]string{"1 type=type-a", "3 type=type-b"}, nil},
		{"deep obj", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("status", "sub"), LabelFromKey: "type",
			LabelsFromPath: map[string][]string{"active": p("active")}, ValueFrom: p("ready")}},
			[]string{"2 active=1,type=type-a", "4 active=3,type=type-b"}, nil},
		{"path-relative valueFrom value", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("metadata"),
			LabelsFromPath: map[string][]string{"name": p("name")}, ValueFrom: p("creationTimestamp")}},
			[]string{"1.6563744e+09 name=foo"}, nil},
		{"non-existent path", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("foo"),
			LabelsFromPath: map[string][]string{"name": p("name")}, ValueFrom: p("creationTimestamp")}},
			nil, []string{"[foo]: got nil while resolving path"}},
		{"exist path but valueFrom path is non-existent single", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("spec", "replicas"), ValueFrom: p("non-existent")}}, nil, nil},
		{"exist path but valueFrom path non-existent array", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("status", "condition_values"),
			LabelsFromPath: map[string][]string{"name": p("name")}, ValueFrom: p("non-existent")}}, nil, nil},
		{"array", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("status", "condition_values"),
			LabelsFromPath: map[string][]string{"name": p("name")}, ValueFrom: p("value")}},
			[]string{"45 name=a", "66 name=b"}, nil},
		{"timestamp", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("metadata", "creationTimestamp")}}, []string{"1.6563744e+09 "}, nil},
		{"quantity_milli", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("status", "quantity_milli")}}, []string{"0.25 "}, nil},
		{"quantity_binarySI", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("status", "quantity_binarySI")}}, []string{"5.36870912e+09 "}, nil},
		{"percentage", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("status", "percentage")}}, []string{"0.28 "}, nil},
		{"path-relative valueFrom percentage", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("metadata"),
			LabelsFromPath: map[string][]string{"name": p("name")}, ValueFrom: p("percentage")}},
			[]string{"0.39 name=foo"}, nil},
		{"boolean_string", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("spec", "paused"), NilIsZero: true}}, []string{"0 "}, nil},
		{"info", Metric{Type: "Info", Info: &MetricInfo{LabelsFromPath: map[string][]string{"version": p("spec", "version")}}},
			[]string{"1 version=v0.0.0"}, nil},
		{"info nil path", Metric{Type: "Info", Info: &MetricInfo{Path: p("does", "not", "exist")}}, nil, nil},
		{"info label from key", Metric{Type: "Info", Info: &MetricInfo{Path: p("status", "active"), LabelFromKey: "type"}},
			[]string{"1 type=type-a", "1 type=type-b"}, nil},
		{"info label from path", Metric{Type: "Info", Info: &MetricInfo{Path: p("status", "sub"),
			LabelsFromPath: map[string][]string{"active": p("active")}}},
			[]string{"1 active=1", "1 active=3"}, nil},
		{"stateset", Metric{Type: "StateSet", StateSet: &MetricStateSet{Path: p("status", "phase"), LabelName: "phase", List: []string{"foo", "bar"}}},
			[]string{"0 phase=bar", "1 phase=foo"}, nil},
		{"stateset nil path", Metric{Type: "StateSet", StateSet: &MetricStateSet{Path: p("does", "not", "exist"), LabelName: "phase", List: []string{"foo", "bar"}}}, nil, nil},
		{"stateset nil valueFrom", Metric{Type: "StateSet", StateSet: &MetricStateSet{Path: p("status"), ValueFrom: p("does", "not", "exist"), LabelName: "phase", List: []string{"foo", "bar"}}}, nil, nil},
		{"stateset non-string value", Metric{Type: "StateSet", StateSet: &MetricStateSet{Path: p("spec", "replicas"), LabelName: "phase", List: []string{"1", "2"}}},
			nil, []string{"[spec,replicas]: expected value for path to be string, got float64"}},
		{"stateset non-string valueFrom", Metric{Type: "StateSet", StateSet: &MetricStateSet{Path: p("status"), ValueFrom: p("uptime"), LabelName: "phase", List: []string{"foo", "bar"}}},
			nil, []string{"[status,uptime]: expected value for path to be string, got float64"}},
		{"status_conditions", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("status", "conditions", "[type=Ready]", "status")}}, []string{"1 "}, nil},
		{"status_conditions_all", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("status", "conditions"),
			LabelsFromPath: map[string][]string{"type": p("type")}, ValueFrom: p("status")}},
			[]string{"0 type=Provisioned", "1 type=Ready"}, nil},
		{"= expression matching", Metric{Type: "Info", Info: &MetricInfo{LabelsFromPath: map[string][]string{"bar": p("metadata", "annotations", "bar=baz")}}},
			[]string{"1 bar=baz"}, nil},
		// Beyond kube-state-metrics' cases: its quirks, kept.
		{"index from the end", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("spec", "order", "-1", "id")}}, []string{"3 "}, nil},
		{"index out of range", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("spec", "order", "5", "id")}}, nil, []string{"[spec,order,5,id]: got nil while resolving path"}},
		{"lookup by number", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("spec", "order", "[id=3]", "value")}}, []string{"0 "}, nil},
		{"map with one-part valueFrom", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("status"), ValueFrom: p("uptime")}}, []string{"43.21 "}, nil},
		{"not a number", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("spec", "version")}}, nil,
			[]string{`[spec,version]: []: strconv.ParseFloat: parsing "v0.0.0": invalid syntax`}},
		{"a map where a value was expected", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("status", "condition_values"), ValueFrom: p("name")}}, nil,
			[]string{`[status,condition_values]: [0]: [name]: strconv.ParseFloat: parsing "a": invalid syntax`, `[status,condition_values]: [1]: [name]: strconv.ParseFloat: parsing "b": invalid syntax`}},
		{"a list where a map was expected", Metric{Type: "Gauge", Gauge: &MetricGauge{Path: p("status", "conditions", "type")}}, nil,
			[]string{"[status,conditions,type]: got nil while resolving path"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := evalEach(t, tt.each, cr)
			if !slices.Equal(got, tt.want) {
				t.Errorf("series:\n got %q\nwant %q", got, tt.want)
			}
			if !slices.Equal(errs, tt.errs) {
				t.Errorf("errors:\n got %q\nwant %q", errs, tt.errs)
			}
		})
	}
}

// TestPathLabels holds labelsFromPath to kube-state-metrics'
// Test_addPathLabels: stars copy maps, plain keys win.
func TestPathLabels(t *testing.T) {
	p := func(parts ...string) []string { return parts }
	tests := []struct {
		name   string
		labels map[string][]string
		want   []string
	}{
		{"all", map[string][]string{"bool": p("spec", "order", "-1", "value"), "number": p("spec", "replicas"), "string": p("metadata", "labels", "foo")},
			[]string{"bool=false", "number=1", "string=bar"}},
		{"*", map[string][]string{"*1": p("metadata", "annotations"), "bar": p("metadata", "labels", "foo"), "label_object_*": p("metadata", "annotations")},
			[]string{"bar=bar", "label_object_bar=baz", "label_object_qux=quxx", "qux=quxx"}},
		{"index out of range", map[string][]string{"idx": p("spec", "order", "5")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompiler()
			lp := c.labelsFromPath(tt.labels, "labelsFromPath")
			if len(c.errs) > 0 {
				t.Fatal(c.errs)
			}
			var out evalOut
			out.begin()
			out.addPathLabels(c.set, cr, &lp)
			var got []string
			for _, l := range out.labels {
				name := l.literal
				if l.name >= 0 {
					name = c.set.names[l.name]
				}
				got = append(got, name+"="+l.value)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// decodeJSON decodes an object as Kubernetes' unstructured decoder does:
// integral numbers as int64.
func decodeJSON(s string) (map[string]any, error) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	return convertNumbers(m).(map[string]any), nil
}

func convertNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = convertNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = convertNumbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}
