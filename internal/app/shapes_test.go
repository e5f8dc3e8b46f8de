package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, stopAuditPlane) }

// lines keeps what the app writes.
type lines struct{ testenv.SyncBuffer }

// payloads decodes the JSON lines written so far.
func (l *lines) payloads(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %.200q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func (l *lines) fired(t *testing.T, rule, name string) int {
	n := 0
	for _, p := range l.payloads(t) {
		if p["rule"] == rule && p["name"] == name {
			n++
		}
	}
	return n
}

const oddRules = `rules:
  - name: size-value
    match: {resources: [{group: odd.example.org, kind: Odd}]}
    on: [update]
    fields: [spec.size.value]
    when: "object.spec.size.value > 1"
    actions: [{log: {}}]
  - name: unicode
    match: {resources: [{group: odd.example.org, kind: Odd}]}
    on: [update]
    fields: ['spec["ключ"]']
    actions: [{log: {}}]
  - name: needs-count
    match: {resources: [{group: odd.example.org, kind: Odd}]}
    on: [update]
    when: "object.spec.count > 0"
    actions: [{log: {}}]
`

// TestOddShapes feeds objects of odd shapes through the whole pipeline: a
// CRD that preserves unknown fields, nulls and lists where the rules expect
// maps, unicode keys, and an object near etcd's 1.5 MiB request limit.
// Nothing panics, rules fire where the shape fits, evaluation errors are
// counted and logged, and the process keeps working.
func TestOddShapes(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	odd := schema.GroupVersionResource{Group: "odd.example.org", Version: "v1", Resource: "odds"}
	preserve := true
	if err := env.InstallCRD(&apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "odds.odd.example.org"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: odd.Group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "odds", Kind: "Odd", ListKind: "OddList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}}}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	ns := "odd-shapes"
	if _, err := env.Clientset(t).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rulesFile := t.TempDir() + "/rules.yaml"
	if err := writeTestFile(rulesFile, oddRules); err != nil {
		t.Fatal(err)
	}
	out := &lines{}
	logs := &lines{}
	base := serveApp(t, Config{
		RulesFiles: []string{rulesFile}, Rest: env.Config(),
		Stdout: out, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	testenv.Eventually(t, time.Minute, "ready", func() bool { return get(base+"/readyz") == 200 })

	dyn := env.Dynamic(t).Resource(odd).Namespace(ns)
	create := func(name string, spec any) {
		t.Helper()
		o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "odd.example.org/v1", "kind": "Odd",
			"metadata": map[string]any{"name": name}, "spec": spec}}
		if _, err := dyn.Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	patch := func(name, body string) {
		t.Helper()
		if _, err := dyn.Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatalf("patch %s: %v", name, err)
		}
	}
	create("null-spec", nil)
	create("size-null", map[string]any{"size": nil})
	create("size-list", map[string]any{"size": []any{int64(1), int64(2)}})
	create("size-string", map[string]any{"size": "big"})
	create("unicode", map[string]any{"ключ": "значение", "名前": "テスト", "emoji 🎉": true})
	create("huge", map[string]any{"blob": strings.Repeat("x", 1400*1024), "size": map[string]any{"value": int64(1)}})

	patch("null-spec", `{"spec":{"other":1}}`)
	patch("size-list", `{"spec":{"size":[3]}}`)
	patch("size-string", `{"spec":{"size":"bigger"}}`)
	patch("size-null", `{"spec":{"size":{"value":2}}}`)
	patch("unicode", `{"spec":{"ключ":"другое"}}`)
	patch("huge", `{"spec":{"size":{"value":5}}}`)

	testenv.Eventually(t, 30*time.Second, "the firings", func() bool {
		return out.fired(t, "size-value", "size-null") == 1 && out.fired(t, "unicode", "unicode") == 1 && out.fired(t, "size-value", "huge") == 1
	})
	for _, name := range []string{"null-spec", "size-list", "size-string"} {
		if n := out.fired(t, "size-value", name); n != 0 {
			t.Errorf("size-value fired %d times for %s, whose spec.size.value is not a number", n, name)
		}
	}
	for _, p := range out.payloads(t) {
		if p["name"] == "huge" {
			b, _ := json.Marshal(p)
			if len(b) > 64*1024 {
				t.Errorf("the huge object's payload is %d bytes; only the changed field belongs in it", len(b))
			}
		}
		if p["name"] == "unicode" && !strings.Contains(mustJSON(p["changes"]), `/spec/ключ`) {
			t.Errorf("unicode change path: %s", mustJSON(p["changes"]))
		}
	}
	if v := metricOf(t, base, "fieldwatch_rule_evaluation_errors_total"); v == 0 {
		t.Error("no rule evaluation error counted: needs-count reads a field no object has")
	}
	if !strings.Contains(logs.String(), "rule evaluation failed") {
		t.Error("evaluation errors were not logged")
	}
	if strings.Contains(logs.String(), "panic") {
		t.Errorf("a panic was logged:\n%s", logs.String())
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// serveApp runs the app with cfg on a free loopback HTTP address until
// the test ends, and returns that address as a base URL.
func serveApp(t *testing.T, cfg Config) string {
	t.Helper()
	addr := make(chan string, 1)
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Ready = func(a string) { addr <- a }
	testenv.RunUntilCleanup(t, 30*time.Second, func(ctx context.Context) error { return Run(ctx, cfg) })
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(time.Minute):
		t.Fatal("the app did not serve HTTP within a minute")
		return ""
	}
}

func get(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

func metricOf(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+" ") {
			var v float64
			f := strings.Fields(line)
			_, _ = fmt.Sscan(f[len(f)-1], &v)
			return v
		}
	}
	return 0
}

func writeTestFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }
