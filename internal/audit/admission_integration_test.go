package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// admissionLabel is the namespace label the test webhook configurations
// select: each test registers its endpoint for the namespaces labelled
// with its own value, so that tests never see each other's writes.
const admissionLabel = "fieldwatch.io/admission-test"

// tapSink keeps every record it is given and passes them on.
type tapSink struct {
	next Sink
	mu   sync.Mutex
	recs []Record
}

// Add passes recs on, then keeps them: a record it shows is in next.
func (s *tapSink) Add(source string, recs []Record, ignored int) {
	kept := slices.Clone(recs)
	s.next.Add(source, recs, ignored)
	s.mu.Lock()
	s.recs = append(s.recs, kept...)
	s.mu.Unlock()
}

func (s *tapSink) records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.recs)
}

// admissionFixture is an admission endpoint on 127.0.0.1 that the shared
// control plane calls over TLS, through a ValidatingWebhookConfiguration
// of configmaps and widgets (with their status and scale) in the
// namespaces labelled for one test.
type admissionFixture struct {
	a     *Admission
	m     *AdmissionMetrics
	url   string
	caPEM []byte
	ca    *testenv.CA
	sink  *tapSink
}

// startAdmission serves an endpoint feeding next, registers it for the
// namespaces labelled label, and waits until the apiserver calls it.
func startAdmission(t testing.TB, env *testenv.Env, next Sink, label string, opts AdmissionOptions) *admissionFixture {
	t.Helper()
	ca, err := testenv.NewCA("fieldwatch-admission-test-" + label)
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := ca.ServerCert("fieldwatch-admission")
	if err != nil {
		t.Fatal(err)
	}
	files, err := testenv.WriteFiles(t.TempDir(), testenv.NamedData{Name: "tls.crt", Data: crt}, testenv.NamedData{Name: "tls.key", Data: key})
	if err != nil {
		t.Fatal(err)
	}
	fx := &admissionFixture{m: NewAdmissionMetrics(nil), caPEM: ca.CertPEM, ca: ca, sink: &tapSink{next: next}}
	opts.CertFile, opts.KeyFile, opts.Metrics = files[0], files[1], fx.m
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if fx.a, err = NewAdmission(opts, fx.sink); err != nil {
		t.Fatal(err)
	}
	fx.url = serveAdmission(t, fx.a) + AdmissionPath
	registerWebhook(t, env, "fieldwatch-test-"+label, fx.url, ca.CertPEM, label, admissionregistrationv1.Ignore)
	probe := label + "-probe"
	labelledNamespace(t, env, probe, label)
	cms := env.Dynamic(t).Resource(configmaps).Namespace(probe)
	n := 0
	testenv.Eventually(t, time.Minute, "the apiserver to call the admission endpoint", func() bool {
		n++
		_, err := cms.Create(context.Background(), configMap(fmt.Sprintf("probe-%d", n), nil), metav1.CreateOptions{})
		if err != nil {
			t.Logf("probe: %v", err)
		}
		for _, r := range fx.sink.records() {
			if r.Namespace == probe {
				return true
			}
		}
		return false
	})
	return fx
}

// registerWebhook registers url (served with a certificate of caPEM) for
// the writes to configmaps and widgets in the namespaces labelled label,
// until the test ends.
func registerWebhook(t testing.TB, env *testenv.Env, name, url string, caPEM []byte, label string, policy admissionregistrationv1.FailurePolicyType) {
	t.Helper()
	scope := admissionregistrationv1.NamespacedScope
	none := admissionregistrationv1.SideEffectClassNone
	equivalent := admissionregistrationv1.Equivalent
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "record.fieldwatch.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"", "example.com"}, APIVersions: []string{"v1"},
					Resources: []string{"configmaps", "widgets", "widgets/status", "widgets/scale"}, Scope: &scope},
			}},
			FailurePolicy:           &policy,
			SideEffects:             &none,
			TimeoutSeconds:          ptr(int32(2)),
			MatchPolicy:             &equivalent,
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{admissionLabel: label}},
		}},
	}
	vwc := env.Clientset(t).AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := vwc.Create(context.Background(), cfg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the webhook %s: %v", name, err)
	}
	t.Cleanup(func() { _ = vwc.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// labelledNamespace creates the namespace ns labelled for the test label.
func labelledNamespace(t testing.TB, env *testenv.Env, ns, label string) {
	t.Helper()
	_, err := env.Clientset(t).CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{admissionLabel: label}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// observeHashed watches gvr in ns as the watcher does with ContentHash,
// submitting to a, its changes stamped by now (time.Now when nil).
func observeHashed(t testing.TB, ctx context.Context, env *testenv.Env, a *Attributor, gvr schema.GroupVersionResource, ns string, now func() time.Time, gate chan struct{}) *observer {
	t.Helper()
	o := &observer{t: t, a: a, gvr: gvr, ns: ns, gate: gate, hashed: true, now: now, byObject: map[string][]*watched{},
		terminating: map[string]bool{}, lastRV: map[string]string{}}
	w, err := env.Dynamic(t).Resource(gvr).Namespace(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch %s in %s: %v", gvr.Resource, ns, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.run(ctx, w)
	}()
	t.Cleanup(func() {
		w.Stop()
		<-done
	})
	return o
}

// TestAdmissionAttribution: impersonated users and a service account
// create (with generateName), update, patch, apply, scale, write the
// status of and delete ConfigMaps and Widgets through a real apiserver
// that calls the endpoint over TLS; every watched change is attributed
// exactly to its writer, from admission alone. It also holds what the
// matching relies on of the generic registry: a create's object already
// has its uid and generated name and the content stored, an update's
// oldObject the version it applied to and its object the content stored;
// and what admission is told of a user: the impersonated one, with no
// trace of who impersonated, and the credential ID of a service account's
// token.
func TestAdmissionAttribution(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns, label = "adm-writers", "writers"
	labelledNamespace(t, env, ns, label)
	ix := NewIndex(IndexOptions{})
	at := NewAttributor(ix, AttributorOptions{Wait: 20 * time.Second, Sources: change.SourceAdmission})
	t.Cleanup(at.Close)
	fx := startAdmission(t, env, ix, label, AdmissionOptions{})
	writers := []testenv.Writer{env.Impersonating(t, "alice"), env.Impersonating(t, "bob"), env.ServiceAccountWriter(t, ns, "deployer")}
	obs := map[string]*observer{
		"configmaps": observeHashed(t, ctx, env, at, configmaps, ns, nil, nil),
		"widgets":    observeHashed(t, ctx, env, at, widgets, ns, nil, nil),
	}
	type step struct {
		verb string
		do   func(w testenv.Writer, name string) (string, error) // returns the object's name
	}
	cms := func(w testenv.Writer) dynamic.ResourceInterface { return w.Dynamic.Resource(configmaps).Namespace(ns) }
	ws := func(w testenv.Writer) dynamic.ResourceInterface { return w.Dynamic.Resource(widgets).Namespace(ns) }
	steps := map[string][]step{
		"configmaps": {
			{"create", func(w testenv.Writer, name string) (string, error) {
				cm := configMap("", map[string]any{"k": "1"})
				cm.SetGenerateName(name + "-")
				got, err := cms(w).Create(ctx, cm, metav1.CreateOptions{})
				if err != nil {
					return "", err
				}
				return got.GetName(), nil
			}},
			{"update", func(w testenv.Writer, name string) (string, error) {
				cm, err := cms(w).Get(ctx, name, metav1.GetOptions{})
				if err == nil {
					_ = unstructured.SetNestedField(cm.Object, "2", "data", "k")
					_, err = cms(w).Update(ctx, cm, metav1.UpdateOptions{})
				}
				return name, err
			}},
			{"patch", func(w testenv.Writer, name string) (string, error) {
				_, err := cms(w).Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"k":"3"}}`), metav1.PatchOptions{})
				return name, err
			}},
			{"patch", func(w testenv.Writer, name string) (string, error) { // server-side apply
				_, err := cms(w).Patch(ctx, name, types.ApplyPatchType, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"`+name+`"},"data":{"applied":"yes"}}`),
					metav1.PatchOptions{FieldManager: "applier", Force: ptr(true)})
				return name, err
			}},
			{"delete", func(w testenv.Writer, name string) (string, error) {
				return name, cms(w).Delete(ctx, name, metav1.DeleteOptions{})
			}},
		},
		"widgets": {
			{"create", func(w testenv.Writer, name string) (string, error) {
				_, err := ws(w).Create(ctx, widget(name, 1), metav1.CreateOptions{})
				return name, err
			}},
			{"update", func(w testenv.Writer, name string) (string, error) { // the status subresource
				wd, err := ws(w).Get(ctx, name, metav1.GetOptions{})
				if err == nil {
					_ = unstructured.SetNestedField(wd.Object, "Ready", "status", "phase")
					_, err = ws(w).UpdateStatus(ctx, wd, metav1.UpdateOptions{})
				}
				return name, err
			}},
			{"patch", func(w testenv.Writer, name string) (string, error) { // the scale subresource
				_, err := ws(w).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}, "scale")
				return name, err
			}},
			{"delete", func(w testenv.Writer, name string) (string, error) {
				return name, ws(w).Delete(ctx, name, metav1.DeleteOptions{})
			}},
		},
	}
	for _, resource := range []string{"configmaps", "widgets"} {
		o := obs[resource]
		n := 0
		for _, w := range writers {
			name := strings.ReplaceAll(strings.TrimPrefix(w.Username, "system:serviceaccount:"+ns+":"), ":", "-")
			for _, s := range steps[resource] {
				got, err := s.do(w, name)
				if err != nil {
					t.Fatalf("%s %s %s as %s: %v", s.verb, resource, name, w.Username, err)
				}
				name = got
				n++
				c := o.waitResolved(t, n, 30*time.Second)[n-1]
				res := c.result
				verb := s.verb
				if verb == "patch" {
					verb = "update" // admission is sent a patch as an update
				}
				if res.Match != change.MatchExact || res.Source != change.SourceAdmission || res.Username() != w.Username || res.Verb != verb {
					t.Errorf("%s %s %s by %s (%s): attributed %+v", resource, c.Type, c.Name, w.Username, s.verb, res)
					continue
				}
				if res.ImpersonatedUser != nil || res.UserAgent != "" || res.AuditID != "" {
					t.Errorf("%s %s: admission names no impersonator, client or audit ID: %+v", resource, c.Name, res)
				}
				_, sa := res.User.Extra["authentication.kubernetes.io/credential-id"]
				if isSA := strings.HasPrefix(w.Username, "system:serviceaccount:"); sa != isSA {
					t.Errorf("%s %s by %s: extra %v: want the credential ID of a service account's token only", resource, c.Name, w.Username, res.User.Extra)
				}
				if !strings.HasPrefix(w.Username, "system:serviceaccount:") && !slices.Contains(res.User.Groups, "fieldwatch:writers") {
					t.Errorf("impersonated write: user %+v, want %s in fieldwatch:writers", res.User, w.Username)
				}
			}
		}
	}
	// The generic registry's order: a create's object is what is stored
	// (its hash is the watched object's), with its uid and generated name.
	created := map[string]watched{}
	for _, o := range obs {
		for _, c := range o.snapshot() {
			if c.Type == change.Created {
				created[c.UID] = c
			}
		}
	}
	checked := 0
	for _, r := range fx.sink.records() {
		c, ok := created[r.ObjectUID]
		if !ok || r.Verb != "create" {
			continue
		}
		checked++
		if r.ContentHash != c.ContentHash || r.Name != c.Name {
			t.Errorf("create of %s: the admission object %s hashed %s, the watched object %s %s", c.Name, r.Name, r.ContentHash, c.Name, c.ContentHash)
		}
	}
	if checked != len(created) {
		t.Errorf("%d creates compared with %d watched", checked, len(created))
	}
	for _, r := range fx.sink.records() {
		if r.Namespace == ns && (r.User.Username == "admin" || slices.Contains(r.User.Groups, "system:masters")) {
			t.Errorf("record %s %s names the impersonator: %+v", r.Verb, r.Name, r.User)
		}
	}
	if n, _ := ix.Pending(); n > 0 {
		// Only the records of the probe's namespace, and none of writes
		// that became changes, may be left.
		for _, e := range ix.adm.fifo[ix.adm.head:] {
			if !e.removed && e.rec.Namespace == ns {
				t.Errorf("a record of %s %s by %s was left unmatched", e.rec.Verb, e.rec.Name, e.rec.Username())
			}
		}
	}
}

// denyingWebhook serves a validating webhook that denies the writes of
// deny, with a certificate of ca; it returns its URL.
func denyingWebhook(t *testing.T, ca *testenv.CA, deny string) string {
	t.Helper()
	crt, key, err := ca.ServerCert("denier")
	if err != nil {
		t.Fatal(err)
	}
	files, err := testenv.WriteFiles(t.TempDir(), testenv.NamedData{Name: "tls.crt", Data: crt}, testenv.NamedData{Name: "tls.key", Data: key})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var rv admissionv1.AdmissionReview
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &rv); err != nil || rv.Request == nil {
			http.Error(rw, "bad review", http.StatusBadRequest)
			return
		}
		rv.Response = &admissionv1.AdmissionResponse{UID: rv.Request.UID, Allowed: rv.Request.UserInfo.Username != deny}
		if !rv.Response.Allowed {
			rv.Response.Result = &metav1.Status{Message: deny + " may not write here"}
		}
		rv.Request = nil
		_ = json.NewEncoder(rw).Encode(rv)
	})}
	go func() { _ = srv.ServeTLS(ln, files[0], files[1]) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String() + "/deny"
}

// TestAdmissionDeniedWrites: another webhook denies alice's patch; bob
// then makes the same patch (the same field manager: the same content).
// Within the candidate TTL of alice's request the change is ambiguous
// between them (her request fits it as well as his); past it, bob's. A
// dry run is never a candidate.
func TestAdmissionDeniedWrites(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns, label = "adm-denied", "denied"
	labelledNamespace(t, env, ns, label)
	clock := newFakeClock()
	clock.now = time.Now()
	ix := NewIndex(IndexOptions{Clock: clock, AdmissionTTL: 5 * time.Second})
	at := NewAttributor(ix, AttributorOptions{Wait: time.Hour, Clock: clock, Sources: change.SourceAdmission})
	t.Cleanup(at.Close)
	fx := startAdmission(t, env, ix, label, AdmissionOptions{})
	registerWebhook(t, env, "fieldwatch-test-denier", denyingWebhook(t, fx.ca, "alice"), fx.caPEM, label, admissionregistrationv1.Fail)
	alice, bob, mallory := env.Impersonating(t, "alice"), env.Impersonating(t, "bob"), env.Impersonating(t, "mallory")
	admin := env.Dynamic(t).Resource(configmaps).Namespace(ns)
	for _, name := range []string{"soon", "later", "dry"} {
		if _, err := admin.Create(ctx, configMap(name, map[string]any{"k": "1"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	o := observeHashed(t, ctx, env, at, configmaps, ns, clock.Now, nil)
	o.waitResolved(t, 3, 30*time.Second) // the admin's creates, listed
	patch := func(w testenv.Writer, name string, dry bool) error {
		opts := metav1.PatchOptions{FieldManager: "editor"}
		if dry {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err := w.Dynamic.Resource(configmaps).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"k":"2"}}`), opts)
		return err
	}
	// testenv.Eventually waits for the denier's configuration to reach
	// the apiserver: until then alice's patch goes through.
	denied := func(name string) {
		t.Helper()
		if err := patch(alice, name, false); !apierrors.IsForbidden(err) && !strings.Contains(fmt.Sprint(err), "may not write here") {
			t.Fatalf("alice's patch of %s: %v, want denied", name, err)
		}
	}
	waitDenierActive(t, ctx, env, label+"-probe", alice)
	n := 4 // after the three creates
	for _, tc := range []struct {
		name  string
		after time.Duration
		match change.Match
		users []string
	}{
		{"soon", time.Second, change.MatchAmbiguous, []string{"alice", "bob"}},
		{"later", 6 * time.Second, change.MatchExact, []string{"bob"}},
	} {
		denied(tc.name)
		clock.Step(tc.after)
		if err := patch(bob, tc.name, false); err != nil {
			t.Fatal(err)
		}
		c := o.waitResolved(t, n, 30*time.Second)[n-1]
		n++
		got := c.result.Candidates
		if c.result.Match == change.MatchExact {
			got = []string{c.result.Username()}
		}
		if c.Name != tc.name || c.result.Match != tc.match || !slices.Equal(got, tc.users) {
			t.Errorf("bob's patch of %s %v after alice's denied one: %s %+v, want %s %v", tc.name, tc.after, c.Name, c.result, tc.match, tc.users)
		}
	}
	// A dry run by mallory, then the same patch by bob: bob's.
	dryRuns := testutil.ToFloat64(fx.m.reviewBy[reviewDryRun])
	if err := patch(mallory, "dry", true); err != nil {
		t.Fatal(err)
	}
	if err := patch(bob, "dry", false); err != nil {
		t.Fatal(err)
	}
	c := o.waitResolved(t, n, 30*time.Second)[n-1]
	if c.Name != "dry" || c.result.Match != change.MatchExact || c.result.Username() != "bob" {
		t.Errorf("bob's patch after mallory's dry run: %s %+v", c.Name, c.result)
	}
	if got := testutil.ToFloat64(fx.m.reviewBy[reviewDryRun]) - dryRuns; got != 1 {
		t.Errorf("%v dry runs counted, want 1", got)
	}
}

// waitDenierActive waits until the denying webhook turns alice's writes
// away (a configuration reaches the apiserver's admission a moment after
// it is created), writing to a probe ConfigMap of ns, a namespace the
// denier selects.
func waitDenierActive(t *testing.T, ctx context.Context, env *testenv.Env, ns string, alice testenv.Writer) {
	t.Helper()
	admin := env.Dynamic(t).Resource(configmaps).Namespace(ns)
	if _, err := admin.Create(ctx, configMap("denier-probe", map[string]any{"k": "0"}), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	i := 0
	testenv.Eventually(t, time.Minute, "the denying webhook", func() bool {
		i++
		_, err := alice.Dynamic.Resource(configmaps).Namespace(ns).Patch(ctx, "denier-probe", types.MergePatchType,
			[]byte(fmt.Sprintf(`{"data":{"k":"%d"}}`, i)), metav1.PatchOptions{})
		return err != nil
	})
}

// TestAdmissionForgedReview: a review posted straight to the endpoint,
// naming mallory as the author of exactly what alice's patch stores,
// from the version it applied to, makes alice's change ambiguous, never
// mallory's; a forged review of other content changes nothing.
func TestAdmissionForgedReview(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const label = "forged"
	ix := NewIndex(IndexOptions{})
	at := NewAttributor(ix, AttributorOptions{Wait: 20 * time.Second, Sources: change.SourceAdmission})
	t.Cleanup(at.Close)
	fx := startAdmission(t, env, ix, label, AdmissionOptions{})
	alice := env.Impersonating(t, "alice")
	client := httpsClient(t, fx.caPEM, nil, nil)
	for i, tc := range []struct {
		name    string
		same    bool // the forged object is what alice's patch stores
		match   change.Match
		wantWho []string
	}{
		{"forged-same", true, change.MatchAmbiguous, []string{"alice", "mallory"}},
		{"forged-other", false, change.MatchExact, []string{"alice"}},
	} {
		ns := "adm-" + tc.name
		labelledNamespace(t, env, ns, label)
		cms := alice.Dynamic.Resource(configmaps).Namespace(ns)
		before, err := cms.Create(ctx, configMap(tc.name, map[string]any{"k": "1"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gate := make(chan struct{})
		o := observeHashed(t, ctx, env, at, configmaps, ns, nil, gate)
		after, err := cms.Patch(ctx, tc.name, types.MergePatchType, []byte(`{"data":{"k":"2"}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		forged := after.DeepCopy()
		if !tc.same {
			_ = unstructured.SetNestedField(forged.Object, "3", "data", "k")
		}
		obj, _ := json.Marshal(forged.Object)
		old, _ := json.Marshal(before.Object)
		req := request(admissionv1.Update, "mallory", obj, old)
		req.Namespace, req.Name, req.UID = ns, tc.name, types.UID(fmt.Sprintf("forged-%d", i))
		if code, body := post(t, client, fx.url, reviewOf(t, req)); code != 200 {
			t.Fatalf("forged review: %d %s", code, body)
		}
		testenv.Eventually(t, 10*time.Second, "the forged record", func() bool {
			return slices.ContainsFunc(fx.sink.records(), func(r Record) bool { return r.RequestUID == string(req.UID) })
		})
		close(gate)
		cs := o.waitResolved(t, 2, 30*time.Second) // the create (listed) and the patch
		res := cs[1].result
		who := res.Candidates
		if res.Match == change.MatchExact {
			who = []string{res.Username()}
		}
		if res.Match != tc.match || !slices.Equal(who, tc.wantWho) {
			t.Errorf("%s: alice's patch attributed %+v, want %s %v", tc.name, res, tc.match, tc.wantWho)
		}
	}
}

// TestAdmissionConcurrentWriters: four writers patch one ConfigMap at
// once, each its own key; the apiserver retries the patches that lose a
// race from the newer version, and admission sees each try. Every change
// is attributed exactly, to the writer whose key it changed.
func TestAdmissionConcurrentWriters(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns, label = "adm-concurrent", "concurrent"
	labelledNamespace(t, env, ns, label)
	ix := NewIndex(IndexOptions{})
	at := NewAttributor(ix, AttributorOptions{Wait: 20 * time.Second, Sources: change.SourceAdmission})
	t.Cleanup(at.Close)
	startAdmission(t, env, ix, label, AdmissionOptions{})
	writers := []testenv.Writer{env.Impersonating(t, "w0"), env.Impersonating(t, "w1"), env.Impersonating(t, "w2"), env.ServiceAccountWriter(t, ns, "w3")}
	if _, err := env.Dynamic(t).Resource(configmaps).Namespace(ns).Create(ctx, configMap("shared", map[string]any{}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o := observeHashed(t, ctx, env, at, configmaps, ns, nil, nil)
	const each = 15
	var wg sync.WaitGroup
	for i, w := range writers {
		wg.Go(func() {
			for j := range each {
				patch := fmt.Sprintf(`{"data":{"w%d":"%d"}}`, i, j)
				if _, err := w.Dynamic.Resource(configmaps).Namespace(ns).Patch(ctx, "shared", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					t.Errorf("%s: %v", w.Username, err)
					return
				}
			}
		})
	}
	wg.Wait()
	cs := o.waitResolved(t, 1+len(writers)*each, time.Minute)
	var prev map[string]any
	for _, c := range cs {
		data, _, _ := unstructured.NestedMap(c.object.Object, "data")
		if c.Type != change.Updated {
			prev = data
			continue
		}
		var writer string
		for k, v := range data {
			if prev[k] != v {
				writer = k
			}
		}
		prev = data
		i := int(writer[1] - '0')
		if c.result.Match != change.MatchExact || c.result.Username() != writers[i].Username {
			t.Errorf("change to %s (%s): attributed %+v, want %s", c.ResourceVersion, writer, c.result, writers[i].Username)
		}
	}
}

// TestAdmissionDeleteCollection: a deletecollection is admitted as one
// DELETE per object, each with the object as oldObject: every deletion is
// attributed exactly to its writer; and a graceful deletion of an object
// with a finalizer (an update that sets deletionTimestamp) to the deleter,
// the removal of its last finalizer to whoever removed it.
func TestAdmissionDeleteCollection(t *testing.T) {
	env := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns, label = "adm-collection", "collection"
	labelledNamespace(t, env, ns, label)
	ix := NewIndex(IndexOptions{})
	at := NewAttributor(ix, AttributorOptions{Wait: 20 * time.Second, Sources: change.SourceAdmission})
	t.Cleanup(at.Close)
	startAdmission(t, env, ix, label, AdmissionOptions{})
	alice, bob := env.Impersonating(t, "alice"), env.Impersonating(t, "bob")
	cms := func(w testenv.Writer) dynamic.ResourceInterface { return w.Dynamic.Resource(configmaps).Namespace(ns) }
	o := observeHashed(t, ctx, env, at, configmaps, ns, nil, nil)
	for i := range 3 {
		cm := configMap(fmt.Sprintf("batch-%d", i), map[string]any{"k": "v"})
		cm.SetLabels(map[string]string{"batch": "yes"})
		if _, err := cms(alice).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	held := configMap("held", map[string]any{"k": "v"})
	held.SetFinalizers([]string{"example.com/hold"})
	if _, err := cms(alice).Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o.waitResolved(t, 4, 30*time.Second)
	if err := cms(bob).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "batch=yes"}); err != nil {
		t.Fatal(err)
	}
	if err := cms(bob).Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms(alice).Patch(ctx, "held", types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	cs := o.waitResolved(t, 9, 30*time.Second)
	for _, c := range cs[4:] {
		want := "bob"
		if c.Name == "held" && c.Type == change.Deleted {
			want = "alice" // she removed the last finalizer
		}
		if c.result.Match != change.MatchExact || c.result.Username() != want {
			t.Errorf("%s %s (deletion started %v): attributed %+v, want %s", c.Type, c.Name, c.DeletionStarted, c.result, want)
		}
	}
}
