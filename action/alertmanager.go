package action

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fieldwatch/fieldwatch/rules"
)

// alertmanager posts firings as alerts to Alertmanager's API v2, to every
// URL of an HA pair at once, as Prometheus does: a batch is delivered
// when one Alertmanager accepted it (they share what they notify through
// their cluster), retried when none did.
type alertmanager struct {
	spec    *rules.AlertmanagerAction
	clients *httpClients
	tls     tlsFiles
	urls    []string // .../api/v2/alerts
	timeout time.Duration
	resolve time.Duration
	sev     string
	cluster string
	extURL  string
	token   *fileCache // bearer token, or
	pass    *fileCache // basic auth password
	now     func() time.Time
}

var _ batchHandler = &alertmanager{}

// maxAlertsPerPost bounds the alerts of one request: what the queue holds
// when a worker takes from it, up to this many (BenchmarkAlertmanager).
const maxAlertsPerPost = 64

func newAlertmanager(spec *rules.AlertmanagerAction, clients *httpClients, o Options) *alertmanager {
	am := &alertmanager{
		spec: spec, clients: clients,
		tls:     tlsFiles{ca: spec.CAFile, cert: spec.CertFile, key: spec.KeyFile},
		timeout: spec.Timeout, resolve: spec.ResolveAfter, sev: spec.Severity,
		cluster: o.ClusterName, extURL: o.ExternalURL, now: o.Clock.Now,
	}
	if am.timeout <= 0 {
		am.timeout = rules.DefaultWebhookTimeout
	}
	if am.resolve <= 0 {
		am.resolve = rules.DefaultResolveAfter
	}
	if am.sev == "" {
		am.sev = rules.DefaultSeverity
	}
	for _, u := range spec.URLs {
		am.urls = append(am.urls, strings.TrimRight(u, "/")+"/api/v2/alerts")
	}
	if spec.BearerTokenFile != "" {
		am.token = &fileCache{path: spec.BearerTokenFile}
	}
	if b := spec.BasicAuth; b != nil {
		am.pass = &fileCache{path: b.PasswordFile}
	}
	return am
}

func (am *alertmanager) maxBatch() int { return maxAlertsPerPost }

func (am *alertmanager) attempt(ctx context.Context, it *item) error {
	return am.attemptBatch(ctx, []*item{it})
}

// postableAlert is an alert as Alertmanager's API v2 takes it.
type postableAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     string            `json:"startsAt"`
	EndsAt       string            `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

func (am *alertmanager) attemptBatch(ctx context.Context, batch []*item) error {
	alerts := make([]postableAlert, len(batch))
	for i, it := range batch {
		alerts[i] = am.alert(it)
	}
	body, err := json.Marshal(alerts)
	if err != nil {
		return permanent(fmt.Errorf("alerts: %w", err))
	}
	client, err := am.clients.get(am.tls)
	if err != nil {
		return err // the CA or certificate may be mounted later
	}
	header := http.Header{}
	switch {
	case am.token != nil:
		tok, err := am.token.get()
		if err != nil {
			return fmt.Errorf("bearer token: %w", err)
		}
		header.Set("Authorization", "Bearer "+string(tok))
	case am.pass != nil:
		pw, err := am.pass.get()
		if err != nil {
			return fmt.Errorf("basic auth password: %w", err)
		}
		r := http.Request{Header: header}
		r.SetBasicAuth(am.spec.BasicAuth.Username, string(pw))
	}
	errs := make([]error, len(am.urls))
	var wg sync.WaitGroup
	for i, u := range am.urls {
		wg.Go(func() {
			_, errs[i] = postJSON(ctx, client, u, am.timeout, body, header)
		})
	}
	wg.Wait()
	allPermanent := true
	for _, err := range errs {
		if err == nil {
			return nil // one Alertmanager has them
		}
		allPermanent = allPermanent && isPermanent(err)
	}
	err = errors.Join(errs...)
	if allPermanent {
		return permanent(err)
	}
	var wait time.Duration
	for _, e := range errs {
		wait = max(wait, retryAfter(e))
	}
	return &deliveryError{err: err, retryAfter: wait}
}

// alert builds the alert of one firing (see rules.AlertmanagerAction).
func (am *alertmanager) alert(it *item) postableAlert {
	f := it.f
	e := newEntry(it, am.extURL)
	labels := make(map[string]string, len(am.spec.Labels)+len(rules.AlertLabels))
	for k, v := range am.spec.Labels {
		labels[k] = v
	}
	set := func(k, v string) {
		if v != "" {
			labels[k] = v
		}
	}
	set("alertname", f.Rule.Name)
	set("rule", f.Rule.Name)
	set("cluster", am.cluster)
	set("namespace", f.Object.Namespace)
	set("kind", f.Object.Kind)
	set("name", f.Object.Name)
	user := f.Impersonated
	if user == "" {
		user = f.User
	}
	set("user", user)
	set("severity", am.sev)
	set("id", f.ID)
	ann := map[string]string{"summary": truncateBytes(f.Rule.Name+": "+e.Title, 1024)}
	var b strings.Builder
	for _, c := range e.Changes {
		b.WriteString(c.text())
		b.WriteByte('\n')
	}
	if e.MoreChanges > 0 {
		fmt.Fprintf(&b, "and %d more changes\n", e.MoreChanges)
	}
	if e.CRD != "" {
		b.WriteString(e.CRD + "\n")
	}
	if s := strings.TrimSpace(b.String()); s != "" {
		ann["changes"] = truncateBytes(s, rules.MaxAnnotationBytes)
	}
	if f.Manager != "" {
		ann["manager"] = f.Manager
	}
	if e.Link != "" {
		ann["history"] = e.Link
	}
	start := f.Time
	end := start
	if now := am.now(); now.After(end) {
		end = now
	}
	return postableAlert{
		Labels: labels, Annotations: ann,
		StartsAt:     start.UTC().Format(time.RFC3339Nano),
		EndsAt:       end.Add(am.resolve).UTC().Format(time.RFC3339Nano),
		GeneratorURL: e.Link,
	}
}
