package watcher

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

func TestStoreRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "baseline.db")
	s, err := OpenStore(path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if !s.firstRun() {
		t.Error("a new store is not a first run")
	}
	res := change.Resource{Group: widgets.Group, Version: widgets.Version, Resource: widgets.Resource, Kind: "Widget", Namespaced: true, Custom: true, Preferred: true}
	typ := &objectType{gvk: widgets.GroupVersion().WithKind("Widget"), apiVersion: "example.com/v1", projection: change.Projection{Paths: [][]string{{"spec", "size"}}}}
	a, _ := newObject(widget("ns", "a", 1).Object, typ)
	a.setUID("uid-a")
	a.resourceVersion = "1"
	b, _ := newObject(widget("ns", "b", 2).Object, typ)
	b.setUID("uid-b")
	b.resourceVersion = "2"
	s.put(res, a)
	s.put(res, b)
	s.remove(res, "uid-b")
	if err := s.setKnown(map[schema.GroupResource]bool{widgets.GroupResource(): true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = OpenStore(path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if s.firstRun() || !s.wasKnown(widgets.GroupResource()) || s.wasKnown(configMaps.GroupResource()) {
		t.Errorf("known resources not kept: first %v", s.firstRun())
	}
	got, err := s.load(widgets.GroupResource(), res)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["uid-a"] == nil {
		t.Fatalf("loaded %v, want only uid-a", got)
	}
	if ga := got["uid-a"]; ga.resourceVersion != "1" || !ga.sameContent(a) || !ga.typ.projection.Equal(typ.projection) {
		t.Errorf("loaded %+v, want %+v", ga, a)
	}
	stored, err := s.resources()
	if err != nil || stored[widgets.GroupResource()].Kind != "Widget" {
		t.Errorf("resources %v, %v", stored, err)
	}
}

func TestStoreBadFiles(t *testing.T) {
	for name, write := range map[string]func(path string) error{
		"garbage": func(path string) error {
			return os.WriteFile(path, []byte(strings.Repeat("not a database ", 1000)), 0o600)
		},
		"another bbolt file": func(path string) error {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				return err
			}
			if err := db.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucket([]byte("someone-else"))
				if err != nil {
					return err
				}
				return b.Put([]byte("k"), []byte("v"))
			}); err != nil {
				return err
			}
			return db.Close()
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "baseline.db")
			if err := write(path); err != nil {
				t.Fatal(err)
			}
			s, err := OpenStore(path, testLogger(t))
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer func() { _ = s.Close() }()
			if !s.firstRun() {
				t.Error("a replaced store must start as a first run")
			}
			aside, _ := filepath.Glob(path + ".corrupt-*")
			if len(aside) != 1 {
				t.Errorf("the bad file was not moved aside: %v", aside)
			}
		})
	}
	t.Run("in use", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "baseline.db")
		s, err := OpenStore(path, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Close() }()
		if _, err := OpenStore(path, testLogger(t)); err == nil || !strings.Contains(err.Error(), "in use") {
			t.Errorf("second open: %v, want an in-use error", err)
		}
	})
}

// TestRestartBaseline stops the watcher, changes the cluster, and starts a
// new watcher on the same baseline: what changed while it was down is
// reported, with the right old values, and nothing else.
func TestRestartBaseline(t *testing.T) {
	env := testenv.Shared(t)
	installWidgets(t, env)
	ns := namespace(t, env)
	ctx := context.Background()
	cms := env.Dynamic(t).Resource(configMaps).Namespace(ns)
	for _, name := range []string{"keep", "change", "remove"} {
		_, err := cms.Create(ctx, configMap(ns, name, map[string]any{"v": "0"}), metav1.CreateOptions{})
		mustf(t, err, "create %s", name)
	}
	path := filepath.Join(t.TempDir(), "baseline.db")
	sel := []change.Selector{{Resource: "configmaps"}, {Group: "example.com", Kind: "Widget"}}
	proj := func(change.Resource) change.Projection {
		return change.Projection{Paths: [][]string{{"data"}, {"spec"}}}
	}

	// First run: the existing objects are the baseline, nothing fires.
	first := &recorder{}
	run1 := runWithStore(t, env, path, sel, proj, first)
	_, err := cms.Create(ctx, configMap(ns, "live", map[string]any{"v": "0"}), metav1.CreateOptions{})
	mustf(t, err, "create live")
	testenv.Eventually(t, 30*time.Second, "live", func() bool { return len(first.of(configMaps, ns, "live")) == 1 })
	run1.stop()
	if n := first.count(func(c *Change) bool { return c.Object().GetNamespace() == ns }); n != 1 {
		t.Errorf("first run reported %d changes, want only the live create", n)
	}

	// While down: change one, delete one, create one, leave the rest.
	cm, err := cms.Get(ctx, "change", metav1.GetOptions{})
	mustf(t, err, "get")
	mustf(t, unstructured.SetNestedField(cm.Object, "1", "data", "v"), "set")
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	mustf(t, err, "update while down")
	mustf(t, cms.Delete(ctx, "remove", metav1.DeleteOptions{}), "delete while down")
	_, err = cms.Create(ctx, configMap(ns, "new", map[string]any{"v": "0"}), metav1.CreateOptions{})
	mustf(t, err, "create while down")
	_, err = env.Dynamic(t).Resource(widgets).Namespace(ns).Create(ctx, widget(ns, "w-new", 1), metav1.CreateOptions{})
	mustf(t, err, "create a widget while down")

	second := &recorder{}
	runWithStore(t, env, path, sel, proj, second)
	testenv.Eventually(t, 30*time.Second, "the changes made while down", func() bool {
		return len(second.of(configMaps, ns, "change")) == 1 && len(second.of(configMaps, ns, "remove")) == 1 &&
			len(second.of(configMaps, ns, "new")) == 1 && len(second.of(widgets, ns, "w-new")) == 1
	})
	if c := second.of(configMaps, ns, "change")[0]; c.Type != change.Updated || field(c.Old, "data", "v") != "0" || field(c.New, "data", "v") != "1" {
		t.Errorf("change: %s %v -> %v, want updated 0 -> 1", c.Type, field(c.Old, "data", "v"), field(c.New, "data", "v"))
	}
	if c := second.of(configMaps, ns, "remove")[0]; c.Type != change.Deleted || c.Old.GetName() != "remove" {
		t.Errorf("remove: %s", c.Type)
	}
	if c := second.of(configMaps, ns, "new")[0]; c.Type != change.Created || c.Initial {
		t.Errorf("new: %s initial %v", c.Type, c.Initial)
	}
	if c := second.of(widgets, ns, "w-new")[0]; c.Type != change.Created {
		t.Errorf("w-new: %s", c.Type)
	}
	// A marker made now comes after anything the restart would report.
	_, err = cms.Create(ctx, configMap(ns, "marker", nil), metav1.CreateOptions{})
	mustf(t, err, "create marker")
	testenv.Eventually(t, 30*time.Second, "marker", func() bool { return len(second.of(configMaps, ns, "marker")) == 1 })
	for _, name := range []string{"keep", "live"} {
		if cs := second.of(configMaps, ns, name); len(cs) != 0 {
			t.Errorf("%s did not change while down but was reported: %s", name, kinds(cs))
		}
	}
}

// TestRestartBaselineNamespaces: the restart baseline of a resource watched
// in some namespaces only. Between runs the namespaces change: a namespace
// still watched reports what changed while down; one no longer watched
// reports nothing; one watched now but not before takes its objects as the
// baseline (they are not news), also when the resource is now watched
// everywhere.
func TestRestartBaselineNamespaces(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	a := namespace(t, env)
	b, c := a+"-b", a+"-c"
	for _, ns := range []string{b, c} {
		_, err := env.Clientset(t).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		mustf(t, err, "namespace %s", ns)
	}
	cms := func(ns string) dynamic.ResourceInterface { return env.Dynamic(t).Resource(configMaps).Namespace(ns) }
	set := func(ns, name, v string) {
		t.Helper()
		cm, err := cms(ns).Get(ctx, name, metav1.GetOptions{})
		mustf(t, err, "get %s/%s", ns, name)
		mustf(t, unstructured.SetNestedField(cm.Object, v, "data", "v"), "set")
		_, err = cms(ns).Update(ctx, cm, metav1.UpdateOptions{})
		mustf(t, err, "update %s/%s", ns, name)
	}
	for _, ns := range []string{a, b, c} {
		_, err := cms(ns).Create(ctx, configMap(ns, "x", map[string]any{"v": "0"}), metav1.CreateOptions{})
		mustf(t, err, "create %s/x", ns)
	}
	path := filepath.Join(t.TempDir(), "baseline.db")
	sel := []change.Selector{{Resource: "configmaps"}}
	proj := func(change.Resource) change.Projection { return change.Projection{Paths: [][]string{{"data"}}} }
	marker := func(rec *recorder, ns string) {
		t.Helper()
		name := fmt.Sprintf("marker-%d", time.Now().UnixNano())
		_, err := cms(ns).Create(ctx, configMap(ns, name, nil), metav1.CreateOptions{})
		mustf(t, err, "create marker")
		testenv.Eventually(t, 30*time.Second, "marker in "+ns, func() bool { return len(rec.of(configMaps, ns, name)) == 1 })
	}

	// Run 1 watches a and b.
	run1 := runWithStore(t, env, path, sel, proj, &recorder{}, a, b)
	run1.stop()
	set(a, "x", "1")
	set(b, "x", "1")
	set(c, "x", "1")

	// Run 2 watches a and c: a's change is reported with its old value;
	// c was not watched, so its object is the baseline; b is not watched.
	second := &recorder{}
	run2 := runWithStore(t, env, path, sel, proj, second, a, c)
	testenv.Eventually(t, 30*time.Second, "a/x updated", func() bool { return len(second.of(configMaps, a, "x")) == 1 })
	if ch := second.of(configMaps, a, "x")[0]; ch.Type != change.Updated || field(ch.Old, "data", "v") != "0" || field(ch.New, "data", "v") != "1" {
		t.Errorf("a/x: %s %v -> %v, want updated 0 -> 1", ch.Type, field(ch.Old, "data", "v"), field(ch.New, "data", "v"))
	}
	marker(second, c)
	marker(second, a)
	for _, ns := range []string{b, c} {
		if cs := second.of(configMaps, ns, "x"); len(cs) != 0 {
			t.Errorf("%s/x reported by run 2: %s", ns, kinds(cs))
		}
	}
	run2.stop()
	set(b, "x", "2")
	set(c, "x", "2")
	mustf(t, cms(a).Delete(ctx, "x", metav1.DeleteOptions{}), "delete a/x")

	// Run 3 watches everywhere: c's change and a's deletion are reported;
	// b was not watched by run 2 (its record from run 1 was dropped), so
	// b/x is not news.
	third := &recorder{}
	runWithStore(t, env, path, sel, proj, third)
	testenv.Eventually(t, 30*time.Second, "c/x updated and a/x deleted", func() bool {
		return len(third.of(configMaps, c, "x")) == 1 && len(third.of(configMaps, a, "x")) == 1
	})
	if ch := third.of(configMaps, c, "x")[0]; ch.Type != change.Updated || field(ch.Old, "data", "v") != "1" || field(ch.New, "data", "v") != "2" {
		t.Errorf("c/x: %s %v -> %v, want updated 1 -> 2", ch.Type, field(ch.Old, "data", "v"), field(ch.New, "data", "v"))
	}
	if ch := third.of(configMaps, a, "x")[0]; ch.Type != change.Deleted {
		t.Errorf("a/x: %s, want deleted", ch.Type)
	}
	marker(third, b)
	if cs := third.of(configMaps, b, "x"); len(cs) != 0 {
		t.Errorf("b/x reported by run 3: %s", kinds(cs))
	}
}

// TestRestartAfterCRDGone: a CRD deleted while the watcher was down makes
// the restart report its recorded objects deleted.
func TestRestartAfterCRDGone(t *testing.T) {
	env := testenv.Shared(t)
	ns := namespace(t, env)
	ctx := context.Background()
	things := schema.GroupVersionResource{Group: "things.example.org", Version: "v1", Resource: "things"}
	crd := simpleCRD(things, "Thing")
	mustf(t, env.InstallCRD(crd), "install")
	thing := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "things.example.org/v1", "kind": "Thing",
		"metadata": map[string]any{"name": "t1", "namespace": ns}, "spec": map[string]any{"a": "b"},
	}}
	_, err := env.Dynamic(t).Resource(things).Namespace(ns).Create(ctx, thing, metav1.CreateOptions{})
	mustf(t, err, "create thing")

	path := filepath.Join(t.TempDir(), "baseline.db")
	rec := &recorder{}
	run1 := runWithStore(t, env, path, []change.Selector{{Group: "*", Custom: true}}, nil, rec)
	run1.stop()
	mustf(t, env.Clientset(t).Discovery().RESTClient().Delete().
		AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd.Name).Do(ctx).Error(), "delete CRD")
	testenv.Eventually(t, 30*time.Second, "the CRD to go", func() bool {
		_, err := env.Dynamic(t).Resource(things).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err != nil
	})

	second := &recorder{}
	runWithStore(t, env, path, []change.Selector{{Group: "*", Custom: true}}, nil, second)
	testenv.Eventually(t, 30*time.Second, "t1 to be reported deleted", func() bool {
		cs := second.of(things, ns, "t1")
		return len(cs) == 1 && cs[0].Type == change.Deleted && field(cs[0].Old, "spec", "a") == "b"
	})
}

// running is a watcher with a store, stoppable before the test ends.
type running struct {
	cancel  context.CancelFunc
	done    chan struct{}
	store   *Store
	stopped bool
}

func (r *running) stop() {
	if r.stopped {
		return
	}
	r.stopped = true
	r.cancel()
	<-r.done
	_ = r.store.Close()
}

// runWithStore runs a watcher with the Store at path, in namespaces only
// when some are given.
func runWithStore(t *testing.T, env *testenv.Env, path string, sel []change.Selector, proj func(change.Resource) change.Projection, h Handler, namespaces ...string) *running {
	t.Helper()
	store, err := OpenStore(path, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Selectors: sel, Projection: proj, Handler: h, Store: store, Logger: testLogger(t), RediscoveryInterval: 2 * time.Second}
	if len(namespaces) > 0 {
		cfg.Namespaces = func(change.Resource) []string { return namespaces }
	}
	w, err := New(env.Config(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan struct{}), store: store}
	go func() {
		defer close(r.done)
		_ = w.Run(ctx)
	}()
	t.Cleanup(r.stop)
	testenv.Eventually(t, time.Minute, "watcher to sync", w.Synced)
	return r
}

// TestRestartBaselineHashesSecrets: the values a projection hashes (a
// Secret's data and last-applied annotation) are never in the baseline
// file, and a restart still reports exactly what changed while down:
// unchanged values compare equal, a changed one comes with its hash as
// the old value.
func TestRestartBaselineHashesSecrets(t *testing.T) {
	env := testenv.Shared(t)
	ns := namespace(t, env)
	ctx := context.Background()
	secretsGVR := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	secrets := env.Dynamic(t).Resource(secretsGVR).Namespace(ns)
	const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, name := range []string{"s", "same"} {
		sec := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Secret",
			"metadata": map[string]any{"name": name, "namespace": ns,
				"annotations": map[string]any{lastApplied: `{"stringData":{"c":"plain-text-C"}}`, "team": "blue"}},
			"data": map[string]any{"a": b64("password-A"), "b": b64("password-B")},
		}}
		_, err := secrets.Create(ctx, sec, metav1.CreateOptions{})
		mustf(t, err, "create secret %s", name)
	}
	path := filepath.Join(t.TempDir(), "baseline.db")
	sel := []change.Selector{{Resource: "secrets"}}
	proj := func(change.Resource) change.Projection {
		return change.Projection{Full: true, Hashed: [][]string{{"data", change.AnyKey}, {"metadata", "annotations", lastApplied}}}
	}
	first := &recorder{}
	runWithStore(t, env, path, sel, proj, first).stop()

	raw := baselineText(t, path)
	for _, secret := range []string{b64("password-A"), b64("password-B"), "password-A", "plain-text-C"} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("the baseline file holds %q", secret)
		}
	}
	if !bytes.Contains(raw, []byte(hashPrefix)) || !bytes.Contains(raw, []byte("blue")) {
		t.Errorf("the baseline file holds no hashes, or lost the values it need not hash")
	}

	sec, err := secrets.Get(ctx, "s", metav1.GetOptions{})
	mustf(t, err, "get")
	mustf(t, unstructured.SetNestedField(sec.Object, b64("password-B2"), "data", "b"), "set")
	_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
	mustf(t, err, "update while down")

	// Without the watermarks the restart compares with the recorded
	// objects, hashes included (what happens when the apiserver cannot
	// replay the writes since).
	forgetWatermarks(t, path)
	second := &recorder{}
	runWithStore(t, env, path, sel, proj, second)
	testenv.Eventually(t, 30*time.Second, "the change made while down", func() bool { return len(second.of(secretsGVR, ns, "s")) == 1 })
	c := second.of(secretsGVR, ns, "s")[0]
	if c.Type != change.Updated {
		t.Fatalf("s: %s, want updated", c.Type)
	}
	if a := field(c.Old, "data", "a"); a != b64("password-A") {
		t.Errorf("unchanged data.a, old value %v: want it restored", a)
	}
	if la := field(c.Old, "metadata", "annotations", lastApplied); la != field(c.New, "metadata", "annotations", lastApplied) {
		t.Errorf("unchanged last-applied, old value %v: want it restored", la)
	}
	if b, _ := field(c.Old, "data", "b").(string); !strings.HasPrefix(b, hashPrefix) || field(c.New, "data", "b") != b64("password-B2") {
		t.Errorf("changed data.b: %v -> %v, want its hash -> the new value", b, field(c.New, "data", "b"))
	}
	_, err = secrets.Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "marker", "namespace": ns}}}, metav1.CreateOptions{})
	mustf(t, err, "create marker")
	testenv.Eventually(t, 30*time.Second, "marker", func() bool { return len(second.of(secretsGVR, ns, "marker")) == 1 })
	if cs := second.of(secretsGVR, ns, "same"); len(cs) != 0 {
		t.Errorf("same did not change while down but was reported: %s", kinds(cs))
	}
}

// forgetWatermarks removes the watermarks from the baseline file at path,
// so that the next run compares with the recorded objects.
func forgetWatermarks(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	mustf(t, err, "open the baseline")
	defer func() { _ = db.Close() }()
	mustf(t, db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(metaBucket)).Delete([]byte(watermarksKey))
	}), "forget the watermarks")
}

// TestRestartReplays: a run stops (as after SIGKILL) with changes it was
// handed but never finished, and writes go on while no run watches: the
// next run has the apiserver replay every write since the first run's
// watermark, each its own change in order with the state it replaced,
// those the first run was handed again with the same resourceVersion;
// nothing is compared, nothing merged. The namespace holds more objects
// than a page of the list at the watermark.
func TestRestartReplays(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env)
	ctx := context.Background()
	cms := env.Dynamic(t).Resource(configMaps).Namespace(ns)
	for i := range 520 {
		_, err := cms.Create(ctx, configMap(ns, fmt.Sprintf("bulk-%03d", i), map[string]any{"n": "0"}), metav1.CreateOptions{})
		mustf(t, err, "create bulk-%03d", i)
	}
	_, err := cms.Create(ctx, configMap(ns, "hot", map[string]any{"n": "0"}), metav1.CreateOptions{})
	mustf(t, err, "create")
	set := func(i int) string {
		t.Helper()
		cm, err := cms.Patch(ctx, "hot", types.MergePatchType, fmt.Appendf(nil, `{"data":{"n":"%d"}}`, i), metav1.PatchOptions{})
		mustf(t, err, "update %d", i)
		return cm.GetResourceVersion()
	}
	path := filepath.Join(t.TempDir(), "baseline.db")
	sel := []change.Selector{{Resource: "configmaps"}}
	proj := func(change.Resource) change.Projection { return change.Projection{Paths: [][]string{{"data"}}} }

	// Run 1 finishes updates 1 and 2 and is handed 3 to 5 without
	// finishing them (their actions never end).
	first := &recorder{fail: func(c *Change) error {
		if n, _ := field(c.New, "data", "n").(string); c.Object().GetNamespace() == ns && n >= "3" {
			_ = c.Defer() // never done
		}
		return nil
	}}
	run1 := runWithStore(t, env, path, sel, proj, first, ns)
	var rvs []string
	for i := 1; i <= 5; i++ {
		rvs = append(rvs, set(i))
	}
	testenv.Eventually(t, 30*time.Second, "run 1 to be handed every update", func() bool { return len(first.of(configMaps, ns, "hot")) == 5 })
	informer := watchKey{configMaps, ns}.watermarkKey()
	testenv.Eventually(t, 30*time.Second, "the baseline to record the watermark of update 2", func() bool {
		run1.store.flushMu.Lock()
		defer run1.store.flushMu.Unlock()
		var wm Watermarks
		return json.Unmarshal([]byte(run1.store.written), &wm) == nil && wm[informer] == rvs[1]
	})
	run1.stop()
	// While down.
	for i := 6; i <= 8; i++ {
		rvs = append(rvs, set(i))
	}

	second := &recorder{}
	store, err := OpenStore(path, testLogger(t))
	mustf(t, err, "open the baseline")
	t.Cleanup(func() { _ = store.Close() })
	w, _ := startWatcher(t, env.Config(), Config{Selectors: sel, Projection: proj, Handler: second, Store: store,
		Namespaces: func(change.Resource) []string { return []string{ns} }})
	testenv.Eventually(t, 30*time.Second, "updates 3 to 8", func() bool { return len(second.of(configMaps, ns, "hot")) == 6 })
	cs := second.of(configMaps, ns, "hot")
	for i, c := range cs {
		n := i + 3
		if c.Type != change.Updated || c.Observed != change.ObservedWatch || c.Listed {
			t.Errorf("change %d: %s observed %q listed %v, want an update from a watch event", i, c.Type, c.Observed, c.Listed)
		}
		if a, b := field(c.Old, "data", "n"), field(c.New, "data", "n"); a != fmt.Sprint(n-1) || b != fmt.Sprint(n) {
			t.Errorf("change %d: %v -> %v, want %d -> %d", i, a, b, n-1, n)
		}
		if c.New.GetResourceVersion() != rvs[n-1] {
			t.Errorf("change %d: resourceVersion %s, want %s", i, c.New.GetResourceVersion(), rvs[n-1])
		}
	}
	if v := testutil.ToFloat64(w.baseline.replays.WithLabelValues("replayed")); v != 1 {
		t.Errorf("fieldwatch_baseline_resumes_total{outcome=\"replayed\"} = %v, want 1", v)
	}
	if n := second.count(func(c *Change) bool { return c.Object().GetName() != "hot" }); n != 0 {
		t.Errorf("%d changes of objects that did not change", n)
	}
}

// TestRestartCannotReplay: when the apiserver cannot serve the previous
// run's watermark (here one it has not reached), the restart compares
// with the recorded objects: what changed while down is one change per
// object, its net effect, observed as a restart.
func TestRestartCannotReplay(t *testing.T) {
	env := testenv.Shared(t)
	ns := namespace(t, env)
	ctx := context.Background()
	cms := env.Dynamic(t).Resource(configMaps).Namespace(ns)
	_, err := cms.Create(ctx, configMap(ns, "x", map[string]any{"n": "0"}), metav1.CreateOptions{})
	mustf(t, err, "create")
	path := filepath.Join(t.TempDir(), "baseline.db")
	sel := []change.Selector{{Resource: "configmaps"}}
	proj := func(change.Resource) change.Projection { return change.Projection{Paths: [][]string{{"data"}}} }
	runWithStore(t, env, path, sel, proj, &recorder{}, ns).stop()
	for i := 1; i <= 3; i++ {
		_, err := cms.Patch(ctx, "x", types.MergePatchType, fmt.Appendf(nil, `{"data":{"n":"%d"}}`, i), metav1.PatchOptions{})
		mustf(t, err, "update %d", i)
	}
	db, err := bolt.Open(path, 0o600, nil)
	mustf(t, err, "open the baseline")
	future, _ := json.Marshal(Watermarks{watchKey{configMaps, ns}.watermarkKey(): "999999999999"})
	mustf(t, db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte(metaBucket)).Put([]byte(watermarksKey), future) }), "set a watermark")
	mustf(t, db.Close(), "close")

	second := &recorder{}
	store, err := OpenStore(path, testLogger(t))
	mustf(t, err, "open the baseline")
	t.Cleanup(func() { _ = store.Close() })
	w, _ := startWatcher(t, env.Config(), Config{Selectors: sel, Projection: proj, Handler: second, Store: store,
		Namespaces: func(change.Resource) []string { return []string{ns} }})
	testenv.Eventually(t, 30*time.Second, "the net effect", func() bool { return len(second.of(configMaps, ns, "x")) == 1 })
	c := second.of(configMaps, ns, "x")[0]
	if c.Type != change.Updated || c.Observed != change.ObservedRestart || !c.Listed ||
		field(c.Old, "data", "n") != "0" || field(c.New, "data", "n") != "3" {
		t.Errorf("x: %s observed %q listed %v, %v -> %v; want an update 0 -> 3 observed at the restart",
			c.Type, c.Observed, c.Listed, field(c.Old, "data", "n"), field(c.New, "data", "n"))
	}
	if v := testutil.ToFloat64(w.baseline.replays.WithLabelValues("compared")); v != 1 {
		t.Errorf("fieldwatch_baseline_resumes_total{outcome=\"compared\"} = %v, want 1", v)
	}
}

// baselineText returns the baseline file's bytes followed by every
// record's object JSON (which the file holds base64-encoded).
func baselineText(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	mustf(t, err, "read the baseline")
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	mustf(t, err, "open the baseline")
	defer func() { _ = db.Close() }()
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				var r record
				if json.Unmarshal(v, &r) == nil {
					raw = append(raw, r.Rest...)
				}
				return nil
			})
		})
	})
	mustf(t, err, "read the records")
	return raw
}
