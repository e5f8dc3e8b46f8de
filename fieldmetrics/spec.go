package fieldmetrics

// The structs below are the configuration as written: kube-state-metrics'
// CustomResourceStateMetrics file (its pkg/customresourcestate Metrics and
// MetricsSpec), key for key, and fieldwatch's own `metrics:` section of a
// rules file, which is that file's spec. Embedded structs of
// kube-state-metrics (Labels, MetricMeta) are spelled out: the keys are
// the same.

// File is a CustomResourceStateMetrics file, as kube-state-metrics'
// --custom-resource-state-config-file takes it.
type File struct {
	// Kind, when set, must be CustomResourceStateMetrics.
	Kind string `yaml:"kind" json:"kind,omitempty"`
	// Spec holds the resources.
	Spec Spec `yaml:"spec" json:"spec"`
}

// Spec lists the resources whose objects give series. It is the spec of
// a CustomResourceStateMetrics file and the `metrics:` section of a rules
// file.
type Spec struct {
	Resources []Resource `yaml:"resources" json:"resources"`
}

// Resource gives the series of the objects of one kind (or, with a
// wildcard version or kind, of several).
type Resource struct {
	// GroupVersionKind selects the resource. Version and Kind "" or "*"
	// match any; Group is required (the core group, "", only in a rules
	// file's metrics section).
	GroupVersionKind GroupVersionKind `yaml:"groupVersionKind" json:"groupVersionKind"`
	// MetricNamePrefix prefixes every metric name with PREFIX_; unset
	// (nil) is kube_customresource, "" no prefix.
	MetricNamePrefix *string `yaml:"metricNamePrefix,omitempty" json:"metricNamePrefix,omitempty"`
	// ResourcePlural is accepted for compatibility; the plural comes from
	// discovery, as kube-state-metrics takes it from the CRD.
	ResourcePlural string `yaml:"resourcePlural,omitempty" json:"resourcePlural,omitempty"`
	// CommonLabels are added to every series of the resource.
	CommonLabels map[string]string `yaml:"commonLabels,omitempty" json:"commonLabels,omitempty"`
	// LabelsFromPath are labels whose values are read from the object.
	LabelsFromPath map[string][]string `yaml:"labelsFromPath,omitempty" json:"labelsFromPath,omitempty"`
	// Metrics are the metric families.
	Metrics []Generator `yaml:"metrics" json:"metrics"`
	// ErrorLogV is the klog verbosity of kube-state-metrics at which
	// evaluation errors are logged: 0 logs them at warning level, more at
	// debug level. They are counted either way.
	ErrorLogV int `yaml:"errorLogV,omitempty" json:"errorLogV,omitempty"`
}

// GroupVersionKind selects the resources of a Resource.
type GroupVersionKind struct {
	Group   string `yaml:"group" json:"group"`
	Version string `yaml:"version" json:"version"`
	Kind    string `yaml:"kind" json:"kind"`
}

// Generator is one metric family.
type Generator struct {
	// Name is the metric name after the resource's prefix.
	Name string `yaml:"name" json:"name"`
	// Help is the family's HELP text.
	Help string `yaml:"help,omitempty" json:"help,omitempty"`
	// Each says what series an object gives.
	Each Metric `yaml:"each" json:"each"`
	// CommonLabels and LabelsFromPath add to (and override) the
	// resource's.
	CommonLabels   map[string]string   `yaml:"commonLabels,omitempty" json:"commonLabels,omitempty"`
	LabelsFromPath map[string][]string `yaml:"labelsFromPath,omitempty" json:"labelsFromPath,omitempty"`
	// ErrorLogV overrides the resource's when not 0.
	ErrorLogV int `yaml:"errorLogV,omitempty" json:"errorLogV,omitempty"`
}

// Metric is a Gauge, a StateSet or an Info, as Type says
// (case-insensitive).
type Metric struct {
	Type     string          `yaml:"type" json:"type"`
	Gauge    *MetricGauge    `yaml:"gauge,omitempty" json:"gauge,omitempty"`
	StateSet *MetricStateSet `yaml:"stateSet,omitempty" json:"stateSet,omitempty"`
	Info     *MetricInfo     `yaml:"info,omitempty" json:"info,omitempty"`
}

// MetricGauge gives one series per value at Path: a number, a boolean, an
// RFC 3339 timestamp, a quantity or a percentage; a list or a map gives a
// series per item.
type MetricGauge struct {
	Path           []string            `yaml:"path,omitempty" json:"path,omitempty"`
	LabelsFromPath map[string][]string `yaml:"labelsFromPath,omitempty" json:"labelsFromPath,omitempty"`
	// ValueFrom is the path of the value under Path (under each item).
	ValueFrom []string `yaml:"valueFrom,omitempty" json:"valueFrom,omitempty"`
	// LabelFromKey names the label that holds the key, when Path is a
	// map.
	LabelFromKey string `yaml:"labelFromKey,omitempty" json:"labelFromKey,omitempty"`
	// NilIsZero makes a missing value 0 instead of no series.
	NilIsZero bool `yaml:"nilIsZero,omitempty" json:"nilIsZero,omitempty"`
}

// MetricStateSet gives one series per entry of List, 1 for the entry the
// string at ValueFrom equals and 0 for the others.
type MetricStateSet struct {
	Path           []string            `yaml:"path,omitempty" json:"path,omitempty"`
	LabelsFromPath map[string][]string `yaml:"labelsFromPath,omitempty" json:"labelsFromPath,omitempty"`
	List           []string            `yaml:"list" json:"list"`
	LabelName      string              `yaml:"labelName" json:"labelName"`
	ValueFrom      []string            `yaml:"valueFrom,omitempty" json:"valueFrom,omitempty"`
}

// MetricInfo gives a series of value 1 whose labels are read from the
// object.
type MetricInfo struct {
	Path           []string            `yaml:"path,omitempty" json:"path,omitempty"`
	LabelsFromPath map[string][]string `yaml:"labelsFromPath,omitempty" json:"labelsFromPath,omitempty"`
	LabelFromKey   string              `yaml:"labelFromKey,omitempty" json:"labelFromKey,omitempty"`
}
