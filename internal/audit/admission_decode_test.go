package audit

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/internal/jsonscan"
)

// reviewOf builds the JSON of an AdmissionReview of req, as kube-apiserver
// sends it.
func reviewOf(t testing.TB, req admissionv1.AdmissionRequest) []byte {
	t.Helper()
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &req,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cmJSON is a ConfigMap's JSON, as an admission request or a watch event
// carries it.
func cmJSON(name, uid, rv, value string) []byte {
	return []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"n","uid":"` + uid +
		`","resourceVersion":"` + rv + `","creationTimestamp":"2026-12-03T12:00:00Z","managedFields":[{"manager":"kubectl","operation":"Update","apiVersion":"v1","time":"2026-12-03T12:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:k":{}}}}]},"data":{"k":"` + value + `"}}`)
}

func hashOf(t testing.TB, obj []byte) string {
	t.Helper()
	h, err := jsonscan.ObjectHash(obj)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// request is an AdmissionRequest of a ConfigMap write by user.
func request(op admissionv1.Operation, user string, object, oldObject []byte) admissionv1.AdmissionRequest {
	req := admissionv1.AdmissionRequest{
		UID:       types.UID("req-" + strings.ToLower(string(op)) + "-" + user),
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		Name:      "cm",
		Namespace: "n",
		Operation: op,
		UserInfo: authenticationv1.UserInfo{Username: user, UID: "uid-" + user, Groups: []string{"dev", "system:authenticated"},
			Extra: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/credential-id": {"JTI=7"},
				"iam.example.com/session-token":              {"secret!"},
			}},
		Object:    runtime.RawExtension{Raw: object},
		OldObject: runtime.RawExtension{Raw: oldObject},
	}
	switch op {
	case admissionv1.Create:
		req.Options = runtime.RawExtension{Raw: []byte(`{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1"}`)}
	case admissionv1.Update:
		req.Options = runtime.RawExtension{Raw: []byte(`{"kind":"UpdateOptions","apiVersion":"meta.k8s.io/v1"}`)}
	case admissionv1.Delete:
		req.Options = runtime.RawExtension{Raw: []byte(`{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/v1"}`)}
	}
	return req
}

func TestDecodeReview(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 1, 0, time.UTC)
	obj, old := cmJSON("cm", "u1", "6", "b"), cmJSON("cm", "u1", "5", "a")
	update := request(admissionv1.Update, "alice", obj, old)
	patch := request(admissionv1.Update, "alice", obj, old)
	patch.Options = runtime.RawExtension{Raw: []byte(`{"kind":"UpdateOptions","apiVersion":"meta.k8s.io/v1","fieldManager":"kubectl"}`)}
	create := request(admissionv1.Create, "bob", cmJSON("cm-x7k2p", "u2", "", "a"), nil)
	create.Name = "" // generateName: the request names none, its object does
	del := request(admissionv1.Delete, "carol", nil, old)
	dry := request(admissionv1.Update, "alice", obj, old)
	dry.DryRun = ptr(true)
	scale := request(admissionv1.Update, "dave", []byte(`{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"cm","namespace":"n","uid":"u1","resourceVersion":"5"},"spec":{"replicas":3}}`),
		[]byte(`{"apiVersion":"autoscaling/v1","kind":"Scale","metadata":{"name":"cm","namespace":"n","uid":"u1","resourceVersion":"5"},"spec":{"replicas":1}}`))
	scale.SubResource = "scale"
	status := request(admissionv1.Update, "kubelet", obj, old)
	status.SubResource = "status"
	binding := request(admissionv1.Create, "scheduler", []byte(`{"apiVersion":"v1","kind":"Binding","metadata":{"name":"cm","namespace":"n"}}`), nil)
	binding.SubResource = "binding"
	connect := request(admissionv1.Connect, "erin", []byte(`{"kind":"PodExecOptions"}`), nil)
	other := request(admissionv1.Update, "alice", obj, old)
	other.Resource.Resource = "secrets"

	keep := func(group, resource string) bool { return group == "" && resource == "configmaps" }
	tests := []struct {
		name   string
		req    admissionv1.AdmissionRequest
		result string
		want   Record // compared on the fields set
	}{
		{"update", update, reviewKept, Record{Verb: "update", ObjectUID: "u1", OldResourceVersion: "5", ContentHash: hashOf(t, obj), Name: "cm"}},
		{"patch (as the apiserver sends it)", patch, reviewKept, Record{Verb: "update", ObjectUID: "u1", OldResourceVersion: "5", ContentHash: hashOf(t, obj), Name: "cm"}},
		{"create with generateName", create, reviewKept, Record{Verb: "create", ObjectUID: "u2", Name: "cm-x7k2p", ContentHash: hashOf(t, cmJSON("cm-x7k2p", "u2", "", "a"))}},
		{"delete", del, reviewKept, Record{Verb: "delete", ObjectUID: "u1", OldResourceVersion: "5", Name: "cm"}},
		{"status", status, reviewKept, Record{Verb: "update", Subresource: "status", ObjectUID: "u1", OldResourceVersion: "5", ContentHash: hashOf(t, obj), Name: "cm"}},
		{"scale: no content hash", scale, reviewKept, Record{Verb: "update", Subresource: "scale", ObjectUID: "u1", OldResourceVersion: "5", Name: "cm"}},
		{"dry run", dry, reviewDryRun, Record{}},
		{"binding", binding, reviewNotWrite, Record{}},
		{"connect", connect, reviewNotWrite, Record{}},
		{"unselected resource", other, reviewFiltered, Record{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rv, err := decodeReview(reviewOf(t, tt.req))
			if err != nil {
				t.Fatal(err)
			}
			if rv.uid != string(tt.req.UID) {
				t.Errorf("uid %q, want %q", rv.uid, tt.req.UID)
			}
			rec, result, err := recordOf(&rv, keep, now)
			if err != nil || result != tt.result {
				t.Fatalf("result %q, %v; want %q", result, err, tt.result)
			}
			if result != reviewKept {
				return
			}
			w := tt.want
			if !rec.Admission || rec.Verb != w.Verb || rec.ObjectUID != w.ObjectUID || rec.OldResourceVersion != w.OldResourceVersion ||
				rec.ContentHash != w.ContentHash || rec.Name != w.Name || rec.Subresource != w.Subresource || rec.Namespace != "n" ||
				rec.Resource != "configmaps" || rec.RequestUID != string(tt.req.UID) || !rec.Received.Equal(now) || !rec.Succeeded() {
				t.Errorf("record %+v\nwant %+v", rec, w)
			}
			u := rec.User
			if u.Username != tt.req.UserInfo.Username || u.UID != tt.req.UserInfo.UID || !slices.Equal(u.Groups, tt.req.UserInfo.Groups) {
				t.Errorf("user %+v, want %+v", u, tt.req.UserInfo)
			}
			if len(u.Extra) != 1 || !slices.Equal(u.Extra["authentication.kubernetes.io/credential-id"], []string{"JTI=7"}) {
				t.Errorf("extra %v, want the credential id only (no session token)", u.Extra)
			}
		})
	}
}

func TestDecodeReviewRefusals(t *testing.T) {
	good := string(reviewOf(t, request(admissionv1.Update, "alice", cmJSON("cm", "u1", "6", "b"), cmJSON("cm", "u1", "5", "a"))))
	tests := []struct {
		name, body string
		version    bool // refused for its version
	}{
		{"empty", ``, false},
		{"not JSON", `admission`, false},
		{"a list", `[]`, false},
		{"truncated", good[:len(good)/2], false},
		{"v1beta1", strings.Replace(good, `"admission.k8s.io/v1"`, `"admission.k8s.io/v1beta1"`, 1), true},
		{"another kind", strings.Replace(good, `"AdmissionReview"`, `"ConversionReview"`, 1), true},
		{"no request", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, false},
		{"no uid", strings.Replace(good, `"uid":"req-update-alice"`, `"uid":""`, 1), false},
		{"uid not a string", strings.Replace(good, `"uid":"req-update-alice"`, `"uid":7`, 1), false},
		{"groups not strings", strings.Replace(good, `"groups":["dev"`, `"groups":[1`, 1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeReview([]byte(tt.body))
			if err == nil {
				t.Fatal("no error")
			}
			if got := errors.Is(err, errReviewVersion); got != tt.version {
				t.Errorf("error %v: a version refusal %v, want %v", err, got, tt.version)
			}
		})
	}
	// A review it can read whose objects are not: allowed, nothing kept.
	for _, body := range []string{
		strings.Replace(good, `"object":{"apiVersion"`, `"object":{"metadata":7,"apiVersion"`, 1),
		strings.ReplaceAll(good, `"uid":"u1",`, ``),
	} {
		rv, err := decodeReview([]byte(body))
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if rec, result, err := recordOf(&rv, nil, time.Now()); err == nil {
			t.Errorf("record %+v (%s) of an object without metadata, want an error", rec, result)
		}
	}
}
