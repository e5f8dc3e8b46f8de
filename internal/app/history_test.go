package app

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/history/historytest"
	"github.com/fieldwatch/fieldwatch/internal/history/web"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// historyClient asks a running fieldwatch's history API.
type historyClient struct {
	base  string
	token string
}

// get returns the status and body of path.
func (c historyClient) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// historyEntry is what the tests read of an API entry.
type historyEntry struct {
	seq       int64
	source    string
	id, typ   string
	namespace string
	name, uid string
	user      string // the impersonated user, else the authenticated one
	cluster   string
	changes   []map[string]any
}

// query returns the entries of the API's answer to params (one page).
func (c historyClient) query(t *testing.T, params url.Values) ([]historyEntry, string) {
	t.Helper()
	code, body := c.get(t, "/api/v1/history?"+params.Encode())
	if code != http.StatusOK {
		t.Fatalf("/api/v1/history?%s: %d %s", params.Encode(), code, body)
	}
	var page web.APIPage
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatalf("not a page: %v: %s", err, body)
	}
	var out []historyEntry
	for _, e := range page.Entries {
		var p struct {
			ID, Type, Namespace, Name, UID, Cluster string
			Changes                                 []map[string]any
			Actor                                   struct {
				User, ImpersonatedUser struct{ Username string }
			}
		}
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatal(err)
		}
		user := p.Actor.ImpersonatedUser.Username // the identity the change was made as
		if user == "" {
			user = p.Actor.User.Username
		}
		out = append(out, historyEntry{seq: e.Seq, source: string(e.Source), id: p.ID, typ: p.Type, namespace: p.Namespace,
			name: p.Name, uid: p.UID, user: user, cluster: p.Cluster, changes: p.Changes})
	}
	return out, page.Next
}

// TestHistory: fieldwatch with a state directory keeps every firing in
// its history, as delivered (the user from the audit stream and the
// cluster's name included);
// the API filters, pages and refuses bad input; a user whose service
// account may read ConfigMaps in one namespace sees only that
// namespace's entries (TokenReview and SubjectAccessReview by the real
// apiserver); an unknown token gets 401. Once fieldwatch stopped, its
// trail verifies with the signing key's public key, sealed to its end.
func TestHistory(t *testing.T) {
	plane := sharedAuditPlane(t)
	env := plane.env
	env.EnsureNamespace(t, "hist-a")
	env.EnsureNamespace(t, "hist-b")
	alice := env.Impersonating(t, "alice")
	httpAddr := make(chan string, 1)
	stateDir := t.TempDir()
	keyFile, key := historytest.WriteSigningKey(t)
	pub := key.Public().(ed25519.PublicKey)
	t.Cleanup(func() { verifyStoppedTrail(t, filepath.Join(stateDir, historyFile), pub, 5) }) // after fieldwatch stopped
	fw := runFieldwatch(t, plane, allChanges, func(c *Config) {
		c.StateDir = stateDir
		c.ClusterName = "hist"
		c.History.SigningKeyFile = keyFile
		c.History.InsecureLoopback = true
		c.History.VerifyEvery = 200 * time.Millisecond
		c.Ready = func(addr string) { httpAddr <- addr }
	})
	admin := historyClient{base: "http://" + <-httpAddr} // loopback, no token, --history-insecure-loopback: everything
	fw.warmUp(t, plane)
	ctx := context.Background()
	a := alice.Dynamic.Resource(cmGVR)
	cm1, err := a.Namespace("hist-a").Create(ctx, testConfigMap("cm-1", map[string]any{"k": "1"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"2", "3"} {
		if _, err := a.Namespace("hist-a").Patch(ctx, "cm-1", types.MergePatchType, []byte(`{"data":{"k":"`+v+`"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Namespace("hist-b").Create(ctx, testConfigMap("cm-2", map[string]any{"k": "x"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Namespace("hist-b").Delete(ctx, "cm-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	uid := string(cm1.GetUID())
	var entries []historyEntry
	testenv.Eventually(t, time.Minute, "cm-1's three changes in the history", func() bool {
		entries, _ = admin.query(t, url.Values{"uid": {uid}})
		return len(entries) == 3
	})
	// Newest first, each with its old value and the user.
	for i, want := range []struct{ typ, old, new string }{{"updated", "2", "3"}, {"updated", "1", "2"}, {"created", "", ""}} {
		e := entries[i]
		if e.typ != want.typ || e.user != "alice" || e.source != "delivered" || e.cluster != "hist" {
			t.Errorf("entry %d: %s by %q (%s) in cluster %q, want %s by alice in hist (--cluster-name)", i, e.typ, e.user, e.source, e.cluster, want.typ)
		}
		if want.old != "" && (len(e.changes) != 1 || e.changes[0]["oldValue"] != want.old || e.changes[0]["value"] != want.new) {
			t.Errorf("entry %d changes %v, want /data/k %s -> %s", i, e.changes, want.old, want.new)
		}
	}
	testenv.Eventually(t, time.Minute, "hist-b's two changes", func() bool {
		got, _ := admin.query(t, url.Values{"namespace": {"hist-b"}})
		return len(got) == 2 && got[0].typ == "deleted" && got[1].typ == "created"
	})
	if got, _ := admin.query(t, url.Values{"user": {"alice"}, "resource": {"configmaps"}, "type": {"updated"}}); len(got) != 2 {
		t.Errorf("alice's updates of ConfigMaps: %d entries, want 2", len(got))
	}
	if got, _ := admin.query(t, url.Values{"user": {"bob"}}); len(got) != 0 {
		t.Errorf("bob's changes: %d entries, want none", len(got))
	}
	// Paging one at a time walks the same entries.
	var walked []string
	params := url.Values{"uid": {uid}, "limit": {"1"}}
	for range 10 {
		got, next := admin.query(t, params)
		for _, e := range got {
			walked = append(walked, e.id)
		}
		if next == "" {
			break
		}
		params.Set("cursor", next)
	}
	if want := []string{entries[0].id, entries[1].id, entries[2].id}; !slices.Equal(walked, want) {
		t.Errorf("paged %v, want %v", walked, want)
	}
	// Bad input: a clear 400.
	for _, bad := range []string{"type=moved", "limit=0", "since=yesterday", "cursor=x", "colour=red", "namespace=a&namespace=b"} {
		code, body := admin.get(t, "/api/v1/history?"+bad)
		if code != http.StatusBadRequest || !strings.Contains(string(body), `"error":"`) {
			t.Errorf("?%s: %d %s, want 400 with an error", bad, code, body)
		}
	}

	// A reader of ConfigMaps in hist-a sees hist-a only.
	token := env.ServiceAccountToken(t, "hist-a", "reader")
	env.GrantRead(t, "hist-a", "reader", "", "configmaps", "hist-a")
	reader := historyClient{base: admin.base, token: token}
	got, _ := reader.query(t, url.Values{"limit": {"1000"}})
	if len(got) != 3 {
		t.Errorf("the hist-a reader sees %d entries, want cm-1's 3", len(got))
	}
	for _, e := range got {
		if e.namespace != "hist-a" {
			t.Errorf("the hist-a reader sees %s/%s", e.namespace, e.name)
		}
	}
	if got, _ := reader.query(t, url.Values{"namespace": {"hist-b"}}); len(got) != 0 {
		t.Errorf("the hist-a reader sees %d entries of hist-b", len(got))
	}
	nobody := historyClient{base: admin.base, token: env.ServiceAccountToken(t, "hist-a", "nobody")}
	if got, _ := nobody.query(t, url.Values{}); len(got) != 0 {
		t.Errorf("a service account without access sees %d entries", len(got))
	}
	forged := historyClient{base: admin.base, token: "not-a-token"}
	if code, body := forged.get(t, "/api/v1/history"); code != http.StatusUnauthorized {
		t.Errorf("an invalid token: %d %s, want 401", code, body)
	}
	// The pages: the timeline and cm-1's history, as the reader.
	code, body := reader.get(t, "/history")
	if code != http.StatusOK || !strings.Contains(string(body), "hist-a/cm-1") || strings.Contains(string(body), "cm-2") {
		t.Errorf("the reader's timeline: %d, cm-1 %v, cm-2 %v", code, strings.Contains(string(body), "hist-a/cm-1"), strings.Contains(string(body), "cm-2"))
	}
	code, body = reader.get(t, "/history/object?uid="+uid)
	if code != http.StatusOK || !strings.Contains(string(body), `<code>&#34;2&#34;</code>`) || !strings.Contains(string(body), "alice") {
		t.Errorf("cm-1's page: %d\n%s", code, body)
	}
	if w := fw.metric(t, "fieldwatch_history_entries_total"); w < 5 {
		t.Errorf("fieldwatch_history_entries_total = %v, want at least the 5 firings", w)
	}
	// The trail, verified in place with the signing key while fieldwatch
	// runs (--history-verify-interval): the timeline says its entries
	// were intact, and the summary that signatures were checked.
	testenv.Eventually(t, 30*time.Second, "the timeline's entries verified", func() bool {
		_, body := admin.get(t, "/history")
		return strings.Contains(string(body), `class="mark verified"`)
	})
	if code, body := admin.get(t, "/history/trail"); code != http.StatusOK || !strings.Contains(string(body), "found the trail intact") ||
		!strings.Contains(string(body), "checked with the signing key") || !strings.Contains(string(body), "<td>local</td>") {
		t.Errorf("the trail's summary: %d\n%s", code, body)
	}
	if p := fw.metric(t, "fieldwatch_history_trail_problems"); p != 0 || fw.metric(t, "fieldwatch_history_trail_verified_timestamp_seconds") == 0 {
		t.Errorf("fieldwatch_history_trail_problems %v and a verification's time: want 0 and one", p)
	}
}

// verifyStoppedTrail verifies the trail of the history file a stopped
// fieldwatch left: intact, at least entries entries, its last link a
// checkpoint (the graceful stop's) signed by pub.
func verifyStoppedTrail(t *testing.T, path string, pub ed25519.PublicKey, entries int64) {
	t.Helper()
	s, err := history.OpenSQLite(path, history.SQLiteOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	r, err := history.Verify(func(each func(*history.Link, *history.Entry) error) error {
		return s.Links(context.Background(), each)
	}, history.VerifyOptions{Key: pub, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Intact() || len(r.Chains) != 1 || r.Chains[0].Entries < entries || r.Chains[0].Sealed != r.Chains[0].Links {
		t.Errorf("the trail after a graceful stop: %+v, want one chain of at least %d entries, sealed to its end", r, entries)
	}
}
