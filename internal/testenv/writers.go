package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Writer is a client that writes objects as one identity, with who the
// audit log (and so an attributed payload) should say it is.
type Writer struct {
	// Username is the effective identity.
	Username string
	// UserAgent is the client's User-Agent.
	UserAgent string
	// Dynamic writes as the identity.
	Dynamic dynamic.Interface
}

// Impersonating returns a Writer that the admin user makes impersonate
// username (in group fieldwatch:writers), bound to cluster-admin.
func (e *Env) Impersonating(t testing.TB, username string) Writer {
	t.Helper()
	cfg := e.Config()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: username, Groups: []string{"fieldwatch:writers"}}
	cfg.UserAgent = "writer-" + username
	cfg.QPS, cfg.Burst = 500, 1000
	e.GrantClusterAdmin(t, rbacv1.Subject{Kind: rbacv1.UserKind, Name: username, APIGroup: rbacv1.GroupName})
	return Writer{Username: username, UserAgent: cfg.UserAgent, Dynamic: dynamic.NewForConfigOrDie(cfg)}
}

// ServiceAccountWriter returns a Writer authenticated by a token of the
// service account ns/name (created, with its namespace, if absent), bound
// to cluster-admin.
func (e *Env) ServiceAccountWriter(t testing.TB, ns, name string) Writer {
	t.Helper()
	ctx := context.Background()
	cs := e.Clientset(t)
	e.EnsureNamespace(t, ns)
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	expiry := int64(3600)
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, name, err)
	}
	e.GrantClusterAdmin(t, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns})
	admin := e.Config()
	cfg := &rest.Config{Host: admin.Host, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData},
		UserAgent: "writer-sa-" + name, QPS: 500, Burst: 1000}
	return Writer{Username: "system:serviceaccount:" + ns + ":" + name, UserAgent: cfg.UserAgent, Dynamic: dynamic.NewForConfigOrDie(cfg)}
}

// GrantClusterAdmin binds the cluster-admin ClusterRole to s (a user or a
// service account) and waits until the apiserver's authorizer allows s
// everything: a new binding reaches the RBAC authorizer's cache a moment
// after it is created, and a request made in between is forbidden.
func (e *Env) GrantClusterAdmin(t testing.TB, s rbacv1.Subject) {
	t.Helper()
	ctx := context.Background()
	cs := e.Clientset(t)
	name := strings.NewReplacer(":", "-", "@", "-").Replace(strings.ToLower("fieldwatch-test-writer-" + s.Kind + "-" + s.Namespace + "-" + s.Name))
	_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{s},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	spec := authorizationv1.SubjectAccessReviewSpec{User: s.Name,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "*", Group: "*", Resource: "*"}}
	if s.Kind == rbacv1.ServiceAccountKind {
		spec.User = "system:serviceaccount:" + s.Namespace + ":" + s.Name
		spec.Groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + s.Namespace, "system:authenticated"}
	}
	Eventually(t, 30*time.Second, "cluster-admin for "+spec.User+" to reach the authorizer", func() bool {
		review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		return err == nil && review.Status.Allowed
	})
}

// EnsureNamespace creates the namespace ns unless it exists.
func (e *Env) EnsureNamespace(t testing.TB, ns string) {
	t.Helper()
	_, err := e.Clientset(t).CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
