package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// testGuard takes the updates and deletions of CRDs, as the CRD guard
// does, and answers them with answer; while hold is open it waits in
// Review (started says it is there).
type testGuard struct {
	mu      sync.Mutex
	answer  func(req *admissionv1.AdmissionRequest) (allowed bool, warnings []string, override *change.GuardOverride, err error)
	hold    chan struct{}
	started chan struct{}
	seen    int
}

func (g *testGuard) Takes(group, resource, subresource, operation string) bool {
	return group == "apiextensions.k8s.io" && resource == "customresourcedefinitions" && (operation == "UPDATE" || operation == "DELETE")
}

func (g *testGuard) Review(ctx context.Context, body []byte) (GuardAnswer, error) {
	g.mu.Lock()
	g.seen++
	hold, answer := g.hold, g.answer
	g.mu.Unlock()
	if hold != nil {
		g.started <- struct{}{}
		select {
		case <-hold:
		case <-ctx.Done():
			return GuardAnswer{}, ctx.Err()
		}
	}
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &rv); err != nil {
		return GuardAnswer{}, err
	}
	allowed, warnings, override, err := answer(rv.Request)
	if err != nil {
		return GuardAnswer{}, err
	}
	resp := &admissionv1.AdmissionResponse{UID: rv.Request.UID, Allowed: allowed, Warnings: warnings}
	if !allowed {
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: 422, Reason: metav1.StatusReasonInvalid, Message: "refused by the test guard"}
	}
	b, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: rv.TypeMeta, Response: resp})
	return GuardAnswer{Review: b, Allowed: allowed, Override: override}, err
}

// crdJSON is a CustomResourceDefinition's JSON with a schema of about
// schemaBytes.
func crdJSON(rv string, schemaBytes int) []byte {
	desc := strings.Repeat("d", schemaBytes)
	return []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.example.com","uid":"c1","resourceVersion":"` + rv +
		`"},"spec":{"group":"example.com","names":{"plural":"widgets","kind":"Widget"},"scope":"Namespaced","versions":[{"name":"v1","served":true,"storage":true,` +
		`"schema":{"openAPIV3Schema":{"type":"object","description":"` + desc + `"}}}]}}`)
}

// crdRequest is an AdmissionRequest of a CRD write by user.
func crdRequest(op admissionv1.Operation, uid, user string, object, oldObject []byte) admissionv1.AdmissionRequest {
	req := request(op, user, object, oldObject)
	req.UID = types.UID(uid)
	req.Kind = metav1.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
	req.Resource = metav1.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	req.Name, req.Namespace = "widgets.example.com", ""
	return req
}

// answerOf decodes an endpoint's answer.
func answerOf(t testing.TB, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &rv); err != nil || rv.Response == nil {
		t.Fatalf("answer %.300s: %v", body, err)
	}
	return rv.Response
}

// TestAdmissionGuard: the reviews the Guard takes get its answer
// (warnings, a refusal) whatever Keep selects, and their records carry
// its override; a refused write keeps no record, a guard that fails lets
// the write through; the others never reach the guard and are answered
// while it takes its time; a review of a 5 MB schema fits the default
// body limit.
func TestAdmissionGuard(t *testing.T) {
	p := newWebhookPKI(t, t.TempDir())
	override := &change.GuardOverride{Overridden: true, Reason: "migrated", User: "alice", Operation: "UPDATE", RequestUID: "r-override",
		Checks: []string{"enum-values-removed"}, Objects: 2}
	g := &testGuard{started: make(chan struct{}, 1), answer: func(req *admissionv1.AdmissionRequest) (bool, []string, *change.GuardOverride, error) {
		switch req.UID {
		case "r-refused":
			return false, nil, nil, nil
		case "r-override":
			return true, []string{"fieldwatch: allowed by fieldwatch.io/allow-breaking: migrated"}, override, nil
		case "r-failed":
			return false, nil, nil, errors.New("the guard broke")
		}
		return true, []string{"fieldwatch: enum-values-removed spec.color (v1): 2 objects rejected"}, nil, nil
	}}
	for _, keepCRDs := range []bool{false, true} {
		sink := &recordingSink{}
		m := NewAdmissionMetrics(nil)
		a, err := NewAdmission(AdmissionOptions{CertFile: p.certFile, KeyFile: p.keyFile, Metrics: m, Logger: slog.New(slog.DiscardHandler),
			Keep: func(group, resource string) bool {
				return resource == "configmaps" || keepCRDs && resource == "customresourcedefinitions"
			},
			Guard: g, GuardTimeout: time.Minute}, sink)
		if err != nil {
			t.Fatal(err)
		}
		url := serveAdmission(t, a) + AdmissionPath
		c := httpsClient(t, p.ca.CertPEM, nil, nil)
		big := crdJSON("8", 5<<20)
		tests := []struct {
			name     string
			req      admissionv1.AdmissionRequest
			allowed  bool
			warning  string
			result   string // fieldwatch_admission_reviews_total's, when CRDs are kept
			override bool
		}{
			{"a warned update", crdRequest(admissionv1.Update, "r-warned", "alice", crdJSON("8", 10), crdJSON("7", 10)), true, "enum-values-removed", reviewKept, false},
			{"a refused update", crdRequest(admissionv1.Update, "r-refused", "alice", crdJSON("8", 10), crdJSON("7", 10)), false, "", reviewRefused, false},
			{"an overridden update", crdRequest(admissionv1.Update, "r-override", "alice", crdJSON("8", 10), crdJSON("7", 10)), true, "allow-breaking", reviewKept, true},
			{"a guard that fails", crdRequest(admissionv1.Update, "r-failed", "alice", crdJSON("8", 10), crdJSON("7", 10)), true, "", reviewKept, false},
			{"a deletion", crdRequest(admissionv1.Delete, "r-delete", "alice", nil, crdJSON("7", 10)), true, "enum-values-removed", reviewKept, false},
			{"a 5 MB schema", crdRequest(admissionv1.Update, "r-big", "alice", big, crdJSON("7", 5<<20)), true, "enum-values-removed", reviewKept, false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				result := tt.result
				if !keepCRDs {
					result = reviewFiltered
				}
				before, beforeResult := len(sink.all()), testutil.ToFloat64(m.reviewBy[result])
				client := c
				if tt.name == "a 5 MB schema" {
					// Tens of MB of JSON scanned under the race detector
					// on a loaded machine: no time limit but the test's.
					client = &http.Client{Transport: c.Transport}
				}
				code, body := post(t, client, url, reviewOf(t, tt.req))
				if code != 200 {
					t.Fatalf("code %d (%.300s)", code, body)
				}
				resp := answerOf(t, body)
				if resp.UID != tt.req.UID || resp.Allowed != tt.allowed || tt.warning != "" && !strings.Contains(strings.Join(resp.Warnings, "\n"), tt.warning) {
					t.Errorf("answer %+v, want uid %s, allowed %v, a warning with %q", resp, tt.req.UID, tt.allowed, tt.warning)
				}
				if got := testutil.ToFloat64(m.reviewBy[result]) - beforeResult; got != 1 {
					t.Errorf("counted %v %s, want 1", got, result)
				}
				if !keepCRDs || result != reviewKept {
					if n := len(sink.all()); n != before {
						t.Errorf("%d records kept, want none", n-before)
					}
					return
				}
				testenv.Eventually(t, 10*time.Second, "the record", func() bool { return len(sink.all()) == before+1 })
				rec := sink.all()[before]
				if got := rec.Guard != nil; got != tt.override || tt.override && rec.Guard.Reason != "migrated" {
					t.Errorf("record's guard %+v, want an override: %v", rec.Guard, tt.override)
				}
			})
		}

		// A review the guard holds does not hold the others.
		g.mu.Lock()
		g.hold = make(chan struct{})
		g.mu.Unlock()
		heldReview := reviewOf(t, crdRequest(admissionv1.Update, "r-held", "alice", crdJSON("8", 10), crdJSON("7", 10)))
		held := make(chan []byte, 1)
		go func() {
			resp, err := c.Post(url, "application/json", bytes.NewReader(heldReview))
			if err != nil {
				held <- []byte(err.Error())
				return
			}
			defer func() { _ = resp.Body.Close() }()
			b, _ := io.ReadAll(resp.Body)
			held <- b
		}()
		<-g.started
		seen := func() int {
			g.mu.Lock()
			defer g.mu.Unlock()
			return g.seen
		}
		before := seen()
		cm := request(admissionv1.Update, "bob", cmJSON("cm", "u1", "6", "b"), cmJSON("cm", "u1", "5", "a"))
		if code, body := post(t, c, url, reviewOf(t, cm)); code != 200 || allowedUID(t, body) != string(cm.UID) {
			t.Errorf("a ConfigMap review while the guard holds a CRD's: %d %s", code, body)
		}
		if seen() != before {
			t.Error("the guard was asked about a ConfigMap")
		}
		g.mu.Lock()
		close(g.hold)
		g.hold = nil
		g.mu.Unlock()
		if resp := answerOf(t, <-held); resp.UID != "r-held" || !resp.Allowed {
			t.Errorf("the held review's answer: %+v", resp)
		}
	}
}

// TestAdmissionGuardOverrideMatched: the guard's override goes from the
// record to the attribution of the change it matches exactly, and never
// to an ambiguous one (whose request it was cannot be told).
func TestAdmissionGuardOverrideMatched(t *testing.T) {
	override := &change.GuardOverride{Overridden: true, Reason: "migrated", User: "alice", Operation: "UPDATE", RequestUID: "r1", Checks: []string{"crd-removed"}}
	withGuard := admRec("alice", "update", "5", "H1")
	withGuard.Guard = override
	tests := []struct {
		name  string
		recs  []Record
		match change.Match
		guard bool
	}{
		{"exact", []Record{withGuard}, change.MatchExact, true},
		{"exact, beside a retry without it", []Record{func() Record { r := admRec("alice", "update", "5", "H1"); r.RequestUID += "-again"; return r }(), withGuard}, change.MatchExact, true},
		{"ambiguous", []Record{withGuard, admRec("mallory", "update", "5", "H1")}, change.MatchAmbiguous, false},
		{"no override", []Record{admRec("alice", "update", "5", "H1")}, change.MatchExact, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := newAdmissionIndex(newFakeClock())
			ix.Add(SourceAdmission, tt.recs, 0)
			c := admChange(change.Updated, "5", "6", "H1", t0)
			a, ok := ix.match(&c, true)
			if !ok || a.Match != tt.match {
				t.Fatalf("match %v %q, want %q", ok, a.Match, tt.match)
			}
			if got := a.Guard != nil; got != tt.guard || tt.guard && a.Guard.Reason != "migrated" {
				t.Errorf("attribution's guard %+v, want one: %v", a.Guard, tt.guard)
			}
		})
	}
}
