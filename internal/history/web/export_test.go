package web

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// getExport asks for the export as token ("" for none).
func getExport(t *testing.T, base, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/history/export", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// TestExport: /api/v1/history/export gives the trail to a caller that
// may list every resource everywhere (an auditor, by the real
// apiserver's SubjectAccessReview; loopback served as everything), and
// what it gives verifies; a reader of one namespace gets 403, a request
// without a token from elsewhere 401, and a second export while one is
// under way 429.
func TestExport(t *testing.T) {
	store := seed(t, 0)
	s, base := serve(t, store)
	code, body := getExport(t, base, "")
	if code != http.StatusOK {
		t.Fatalf("loopback: %d %s", code, body)
	}
	r, err := history.Verify(func(each func(*history.Link, *history.Entry) error) error {
		_, err := history.ReadExport(bytes.NewReader(body), each)
		return err
	}, history.VerifyOptions{})
	if err != nil || !r.Intact() || len(r.Chains) != 1 || r.Chains[0].Entries == 0 {
		t.Fatalf("the export: %+v, %v: want one intact chain", r, err)
	}

	env := testenv.Shared(t)
	readers := newReaders(t)
	auditor := env.ServiceAccountToken(t, "shop", "auditor")
	cs := env.Clientset(t)
	ctx := context.Background()
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "history-auditor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"list"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "history-auditor"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "history-auditor"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "auditor", Namespace: "shop"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the auditor's export", func() bool {
		code, got := getExport(t, base, auditor)
		return code == http.StatusOK && bytes.Count(got, []byte("\n")) == bytes.Count(body, []byte("\n"))
	})
	if code, body := getExport(t, base, readers.shop); code != http.StatusForbidden || !bytes.Contains(body, []byte("*/*")) {
		t.Errorf("a reader of one namespace: %d %s, want 403 saying what it needs", code, body)
	}
	if code, _ := getExport(t, base, "not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("an invalid token: %d, want 401", code)
	}
	s.exporting <- struct{}{} // an export under way
	if code, _ := getExport(t, base, ""); code != http.StatusTooManyRequests {
		t.Errorf("a second export at once: %d, want 429", code)
	}
	<-s.exporting
}
