package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// AttributionPolicy is the audit policy of the attribution tests:
// Metadata level for writes to ConfigMaps and Widgets, RequestResponse for
// ConfigMaps in namespace "exact" (exact matching), nothing in namespace
// "unaudited" (no audit event: unmatched), nothing for reads.
const AttributionPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: None
  verbs: [get, list, watch]
- level: None
  namespaces: [unaudited]
- level: RequestResponse
  namespaces: [exact]
  resources: [{group: "", resources: [configmaps]}]
- level: Metadata
  resources: [{group: "", resources: [configmaps]}, {group: example.com, resources: [widgets]}]
- level: None
`

// Audit turns on kube-apiserver's auditing: a policy and a log file, a
// webhook, or both.
type Audit struct {
	// Policy is an audit.k8s.io/v1 Policy document (YAML), written to a
	// file for --audit-policy-file.
	Policy string
	// LogPath, when set, is where the apiserver writes its audit log, JSON
	// lines (--audit-log-path, --audit-log-format=json).
	LogPath string
	// LogMaxSizeMB rotates the log file when it grows past this many
	// megabytes, renaming it (--audit-log-maxsize); 0 never rotates.
	LogMaxSizeMB int
	// Webhook, when set, sends the events to a receiver.
	Webhook *AuditWebhook
}

// AuditWebhook is the receiver of the apiserver's audit webhook backend,
// reached through the kubeconfig of --audit-webhook-config-file.
type AuditWebhook struct {
	// URL is the receiver's HTTPS URL.
	URL string
	// CAPEM is the CA that signed the receiver's serving certificate.
	CAPEM []byte
	// ClientCertPEM and ClientKeyPEM, when set, are the certificate the
	// apiserver presents.
	ClientCertPEM, ClientKeyPEM []byte
	// Token, when set, is the bearer token the apiserver sends.
	Token string
	// Mode is batch (the default) or blocking (--audit-webhook-mode).
	Mode string
	// BatchMaxWait is how long the batch backend waits before sending a
	// batch that is not full (--audit-webhook-batch-max-wait). The
	// apiserver's default is 30s; here it defaults to 100ms so that tests
	// see events at once.
	BatchMaxWait time.Duration
}

// WebhookKubeconfig returns the kubeconfig the apiserver reads to reach
// the receiver.
func (w *AuditWebhook) WebhookKubeconfig() ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["audit"] = &clientcmdapi.Cluster{Server: w.URL, CertificateAuthorityData: w.CAPEM}
	cfg.AuthInfos["apiserver"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: w.ClientCertPEM,
		ClientKeyData:         w.ClientKeyPEM,
		Token:                 w.Token,
	}
	cfg.Contexts["audit"] = &clientcmdapi.Context{Cluster: "audit", AuthInfo: "apiserver"}
	cfg.CurrentContext = "audit"
	return clientcmd.Write(*cfg)
}

// args writes the policy and the webhook kubeconfig into dir and returns
// the kube-apiserver flags that use them.
func (a *Audit) args(dir string) (map[string][]string, error) {
	if a.Policy == "" {
		return nil, errors.New("audit: no policy")
	}
	if a.LogPath == "" && a.Webhook == nil {
		return nil, errors.New("audit: neither a log path nor a webhook")
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(a.Policy), 0o600); err != nil {
		return nil, fmt.Errorf("audit policy: %w", err)
	}
	args := map[string][]string{"audit-policy-file": {policy}}
	if a.LogPath != "" {
		args["audit-log-path"] = []string{a.LogPath}
		args["audit-log-format"] = []string{"json"}
		args["audit-log-maxsize"] = []string{strconv.Itoa(a.LogMaxSizeMB)}
	}
	if w := a.Webhook; w != nil {
		kc, err := w.WebhookKubeconfig()
		if err != nil {
			return nil, fmt.Errorf("audit webhook kubeconfig: %w", err)
		}
		path := filepath.Join(dir, "audit-webhook.kubeconfig")
		if err := os.WriteFile(path, kc, 0o600); err != nil {
			return nil, fmt.Errorf("audit webhook kubeconfig: %w", err)
		}
		mode := w.Mode
		if mode == "" {
			mode = "batch"
		}
		wait := w.BatchMaxWait
		if wait <= 0 {
			wait = 100 * time.Millisecond
		}
		args["audit-webhook-config-file"] = []string{path}
		args["audit-webhook-mode"] = []string{mode}
		args["audit-webhook-batch-max-wait"] = []string{wait.String()}
		// A failed POST is retried after this; the default (10s) would
		// outlast a test.
		args["audit-webhook-initial-backoff"] = []string{"200ms"}
	}
	return args, nil
}
