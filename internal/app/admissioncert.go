package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// certRotation says how fieldwatch keeps its admission endpoint's serving
// certificate itself, without cert-manager: open-policy-agent's
// cert-controller makes a CA and a serving certificate in Secret
// CertSecret (which must exist, empty at first), renews them before they
// expire, and keeps the caBundle of the ValidatingWebhookConfiguration
// WebhookConfig in step; fieldwatch writes the Secret's certificate to
// CertDir for the endpoint (which reloads its files). Every replica runs
// it: they share the Secret, so they serve the same certificate (as the
// peers' mutual check needs).
type certRotation struct {
	secret   types.NamespacedName
	webhook  string
	dnsNames []string
	dir      string
}

// certRotation returns the rotation of c, or nil without CertSecret.
func (c *AdmissionConfig) certRotation() (*certRotation, error) {
	if c.CertSecret == "" {
		return nil, nil
	}
	ns, name, ok := strings.Cut(c.CertSecret, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("--admission-cert-secret %q: want NAMESPACE/NAME", c.CertSecret)
	}
	if c.WebhookConfig == "" || len(c.CertDNSNames) == 0 {
		return nil, errors.New("--admission-cert-secret needs --admission-webhook-config (the ValidatingWebhookConfiguration whose caBundle it keeps) and --admission-cert-dns-names (the Service's DNS name, <service>.<namespace>.svc)")
	}
	dir := c.CertDir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "fieldwatch-admission-certs")
	}
	return &certRotation{secret: types.NamespacedName{Namespace: ns, Name: name}, webhook: c.WebhookConfig, dnsNames: c.CertDNSNames, dir: dir}, nil
}

// files are the serving certificate and key the rotation writes.
func (r *certRotation) files() (cert, key string) {
	return filepath.Join(r.dir, "tls.crt"), filepath.Join(r.dir, "tls.key")
}

// start runs the rotation until ctx ends, in a controller-runtime
// manager of its own (no metrics, no probes, no leader election: every
// replica keeps its files). ready is closed once the files are there.
func (r *certRotation) start(ctx context.Context, a *app, bg interface{ Go(func()) }) (ready <-chan struct{}, err error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := admissionregistrationv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	log := logr.FromSlogHandler(a.log.Handler()).WithName("admission-certs")
	ctrllog.SetLogger(log)
	mgr, err := ctrl.NewManager(a.cfg.Rest, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, fmt.Errorf("admission certificates: %w", err)
	}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, fmt.Errorf("admission certificates: %w", err)
	}
	if err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      r.secret,
		CertDir:        r.dir,
		CAName:         "fieldwatch-admission-ca",
		CAOrganization: "fieldwatch",
		DNSName:        r.dnsNames[0],
		ExtraDNSNames:  r.dnsNames[1:],
		IsReady:        make(chan struct{}),
		Webhooks:       []rotator.WebhookInfo{{Name: r.webhook, Type: rotator.Validating}},
		FieldOwner:     "fieldwatch",
	}); err != nil {
		return nil, fmt.Errorf("admission certificates: %w", err)
	}
	bg.Go(func() {
		if err := mgr.Start(ctx); err != nil {
			a.log.Error("admission certificates: the rotation stopped; the endpoint serves the last certificate written", "error", err)
		}
	})
	done := make(chan struct{})
	bg.Go(func() { r.writeFiles(ctx, a, done) })
	return done, nil
}

// Certificate files are written from the Secret as soon as it has them,
// then checked every certFileSync for a renewal (cert-controller renews
// long before expiry).
const (
	certFileFirst = 200 * time.Millisecond
	certFileSync  = 30 * time.Second
)

// writeFiles writes the Secret's certificate and key into the directory
// whenever they change (the endpoint reloads them), until ctx ends;
// first is closed once they were written. cert-controller keeps the
// Secret, and leaves the files to a volume mount of it: writing them
// here needs no mount, and takes a renewal at once.
func (r *certRotation) writeFiles(ctx context.Context, a *app, first chan<- struct{}) {
	cert, key := r.files()
	var last []byte
	for interval := certFileFirst; ; {
		sec, err := a.kube.CoreV1().Secrets(r.secret.Namespace).Get(ctx, r.secret.Name, metav1.GetOptions{})
		switch {
		case err != nil && ctx.Err() == nil:
			a.log.Warn("admission certificates: cannot read the Secret", "secret", r.secret.String(), "error", err)
		case err == nil && len(sec.Data["tls.crt"]) > 0 && len(sec.Data["tls.key"]) > 0 && !bytes.Equal(sec.Data["tls.crt"], last):
			// The key first: the endpoint reloads when either changes,
			// and a certificate without its key does not load.
			if err := writeFileAtomic(key, sec.Data["tls.key"]); err != nil {
				a.log.Error("admission certificates: cannot write the key", "error", err)
				break
			}
			if err := writeFileAtomic(cert, sec.Data["tls.crt"]); err != nil {
				a.log.Error("admission certificates: cannot write the certificate", "error", err)
				break
			}
			if last == nil {
				close(first)
			}
			last = sec.Data["tls.crt"]
			interval = certFileSync
			a.log.Info("admission certificates: serving certificate written", "secret", r.secret.String(), "dir", r.dir)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// writeFileAtomic replaces path with data through a rename, so that a
// reader never sees half of it.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
