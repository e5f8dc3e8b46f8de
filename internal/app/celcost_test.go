package app

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestCostlyRulesDoNotStallTheWorkers: a rule whose when would match a
// regex of 10,003 instructions against 1 MiB (3 minutes of RE2 each,
// before) on more objects than there are workers fails on each with the
// cost limit, counted and logged as evaluation errors, and the workers
// stay free: a change made after them fires within seconds.
func TestCostlyRulesDoNotStallTheWorkers(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	ns := "costly-rules"
	cs := env.Clientset(t)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rulesFile := t.TempDir() + "/rules.yaml"
	if err := writeTestFile(rulesFile, `rules:
  - name: costly
    match: {resources: [{group: "", kind: ConfigMap}], namespaces: [`+ns+`]}
    when: object.metadata.name != 'ok' && object.data.v.matches('`+strings.Repeat("a{1000}", 10)+`b')
    actions: [{log: {}}]
  - name: cheap
    match: {resources: [{group: "", kind: ConfigMap}], namespaces: [`+ns+`]}
    when: object.metadata.name == 'ok'
    actions: [{log: {}}]
`); err != nil {
		t.Fatal(err)
	}
	out, logs := &lines{}, &lines{}
	base := serveApp(t, Config{
		RulesFiles: []string{rulesFile}, Rest: env.Config(),
		Stdout: out, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	testenv.Eventually(t, time.Minute, "ready", func() bool { return get(base+"/readyz") == 200 })

	const costly = 6 // more than the 4 workers
	value := strings.Repeat("a", 1<<20)
	for i := range costly {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "big-" + string(rune('a'+i))}, Data: map[string]string{"v": value}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, time.Minute, "an evaluation error for each costly object", func() bool {
		return metricOf(t, base, "fieldwatch_rule_evaluation_errors_total") >= costly
	})
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ok"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the cheap rule to fire", func() bool { return out.fired(t, "cheap", "ok") == 1 })
	if n := out.fired(t, "costly", "big-a"); n != 0 {
		t.Errorf("the costly rule fired %d times", n)
	}
	if !strings.Contains(logs.String(), "rule evaluation failed") || !strings.Contains(logs.String(), "rule costly: when: cost limit exceeded: matches would cost") {
		t.Errorf("the cost limit was not logged:\n%.3000s", logs.String())
	}
}
