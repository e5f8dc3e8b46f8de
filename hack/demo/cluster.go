package main

import (
	"context"
	"fmt"
	"net"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// auditPolicy audits, at Metadata level, the writes the demo makes to
// custom resources (the scale and status subresources included), to CRDs
// and to ConfigMaps (the warm-up write), and nothing else: who made a
// change is all attribution needs.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
omitManagedFields: true
rules:
  - level: None
    verbs: [get, list, watch]
  - level: Metadata
    resources:
      - {group: example.com}
      - {group: apiextensions.k8s.io, resources: [customresourcedefinitions]}
      - {group: "", resources: [configmaps]}
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
`

// people is the group the demo's users are in, bound to cluster-admin.
const people = "demo:people"

// cluster is the demo's control plane: a kube-apiserver that audits with
// auditPolicy and posts its audit events to fieldwatch's receiver at
// auditAddr, whose certificates are tls.
type cluster struct {
	env       *testenv.Env
	tls       *testenv.AuditTLS
	auditAddr string
}

// startCluster starts the control plane. The receiver's address is picked
// before fieldwatch runs, because the apiserver is told it at start; until
// fieldwatch listens, the apiserver retries its posts.
func startCluster(dir string) (*cluster, error) {
	certs, err := testenv.NewAuditTLS(dir, "fieldwatch-demo-audit")
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	// Batches go out at least every 100ms (testenv's default), so that a
	// payload waits little for the name of its writer.
	env, err := testenv.New(testenv.Options{Audit: &testenv.Audit{Policy: auditPolicy, Webhook: certs.Webhook("https://" + addr + "/")}})
	if err != nil {
		return nil, err
	}
	return &cluster{env: env, tls: certs, auditAddr: addr}, nil
}

// fieldwatchArgs are the flags of `fieldwatch run` for its audit webhook
// receiver: the apiserver's client certificate is the only one accepted.
func (c *cluster) fieldwatchArgs() []string {
	return []string{"--audit-webhook-addr", c.auditAddr,
		"--audit-webhook-cert-file", c.tls.CertFile, "--audit-webhook-key-file", c.tls.KeyFile,
		"--audit-webhook-client-ca-file", c.tls.CAFile, "--audit-webhook-client-name", c.tls.ClientName}
}

// as returns a client that acts as user (the admin impersonates them, as
// kubectl --as does).
func (c *cluster) as(ctx context.Context, user string) (dynamic.Interface, error) {
	cs, err := kubernetes.NewForConfig(c.env.Config())
	if err != nil {
		return nil, err
	}
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fieldwatch-demo-people"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: people, APIGroup: rbacv1.GroupName}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("bind %s to cluster-admin: %w", people, err)
	}
	// A new binding reaches the authorizer's cache a moment later.
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{people},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "*", Group: "*", Resource: "*"}}}
	for deadline := time.Now().Add(30 * time.Second); ; {
		got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err == nil && got.Status.Allowed {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s is not allowed to write after 30s: %v", user, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cfg := c.env.Config()
	cfg.Impersonate.UserName, cfg.Impersonate.Groups = user, []string{people}
	cfg.UserAgent = "fieldwatch-demo"
	return dynamic.NewForConfig(cfg)
}

// freeAddr returns a free 127.0.0.1 port.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String(), nil
}
