package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/internal/app"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// defaultCMRules is a rules file watching the ConfigMaps of namespace default.
const defaultCMRules = "rules:\n  - name: cm\n    match: {resources: [{group: '', kind: ConfigMap}], namespaces: [default]}\n    actions: [{log: {}}]\n"

// openFDs returns how many file descriptors process pid holds.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// TestHTTPServersUnderIdleConnectionFlood runs fieldwatch with a
// descriptor limit of 1,024 (soft and hard) and opens twice as many
// keep-alive connections to one of its servers (/metrics and the probes,
// or the audit webhook receiver over TLS), each of which sends one request
// and then stays idle. A server holds no more than its cap (half the limit
// shared by the listeners: the rest is kept for the watcher and the state
// files), closing the connection idle the longest for each new one, so
// that /healthz and /readyz still answer on a new connection, and so does
// an audit post; the connections it held are closed by the idle timeout.
// Before the cap, the idle connections took every descriptor: a new
// /healthz was never answered, nor a new connection to the receiver.
func TestHTTPServersUnderIdleConnectionFlood(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	kc := env.WriteKubeconfig(t)
	rules := writeFile(t, "rules.yaml", defaultCMRules)
	at, err := testenv.NewAuditTLS(t.TempDir(), "flood-audit-ca")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(at.CAPEM)
	clientCert, err := tls.X509KeyPair(at.ClientCertPEM, at.ClientKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	const fdLimit = 1024
	for _, tc := range []struct {
		name   string
		server string // its label in the metrics
		audit  bool   // flood the audit webhook receiver
	}{
		{name: "metrics and probes", server: "http"},
		{name: "audit webhook", server: "audit-webhook", audit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The idle timeout outlasts the first cap's worth of
			// connections, so that the cap is reached and evicts: TLS
			// handshakes of a -race binary on a loaded machine are slow
			// (under make test at a load average of 20, 2,048 of them took
			// 168 s, and with 10 s the idle ones timed out before 256
			// were open: nothing was ever evicted).
			idle := 10 * time.Second
			if tc.audit {
				idle = time.Minute
			}
			args := []string{"--rules", rules, "--http-idle-timeout", idle.String()}
			listeners := 1
			if tc.audit {
				args = append(args, "--audit-webhook-addr", "127.0.0.1:0", "--audit-webhook-cert-file", at.CertFile,
					"--audit-webhook-key-file", at.KeyFile, "--audit-webhook-client-ca-file", at.CAFile, "--audit-webhook-client-name", at.ClientName)
				listeners = 2
			}
			p := launchUnder(t, []string{"prlimit", fmt.Sprintf("--nofile=%d:%d", fdLimit, fdLimit), "--"}, kc, args...)
			p.waitReady(time.Minute)
			addr := p.httpAddr()
			capacity := fdLimit / 2 / listeners
			if v := p.metric(fmt.Sprintf(`fieldwatch_http_connections_max{server=%q}`, tc.server)); v != float64(capacity) {
				t.Fatalf("connection cap %v, want %d (half the descriptor limit, shared by %d listeners)", v, capacity, listeners)
			}
			target, request := addr, "GET /healthz HTTP/1.1\r\nHost: fieldwatch\r\n\r\n"
			dial := func() (net.Conn, error) { return net.DialTimeout("tcp", target, 5*time.Second) }
			if tc.audit {
				target = p.loggedAddr("audit webhook listening")
				request = "POST / HTTP/1.1\r\nHost: fieldwatch\r\nContent-Length: 0\r\n\r\n" // 401: no credentials
				dial = func() (net.Conn, error) {
					return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", target, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})
				}
			}

			const flood = 2 * fdLimit
			var closed atomic.Int64
			for i := range flood {
				c, err := dial()
				if err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				t.Cleanup(func() { _ = c.Close() })
				go func() {
					// Until the server closes it: the request's response,
					// then nothing.
					_, _ = io.Copy(io.Discard, c)
					closed.Add(1)
				}()
				if _, err := io.WriteString(c, request); err != nil {
					t.Fatalf("connection %d: write: %v", i, err)
				}
			}
			fds := openFDs(t, p.cmd.Process.Pid)
			t.Logf("%d connections opened, %d closed by the server so far; fieldwatch holds %d descriptors", flood, closed.Load(), fds)

			fresh := &http.Transport{DisableKeepAlives: true,
				TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12}}
			client := &http.Client{Timeout: 5 * time.Second, Transport: fresh}
			for _, path := range []string{"/healthz", "/readyz"} {
				resp, err := client.Get("http://" + addr + path)
				if err != nil {
					t.Fatalf("%s during the flood: %v", path, err)
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("%s during the flood = %d", path, resp.StatusCode)
				}
			}
			if tc.audit {
				resp, err := client.Post("https://"+target, "application/json", strings.NewReader(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}`))
				if err != nil {
					t.Fatalf("an audit post during the flood: %v", err)
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("an audit post during the flood = %d", resp.StatusCode)
				}
			}
			if fds > fdLimit/2+100 {
				t.Errorf("fieldwatch holds %d descriptors during the flood, want at most %d for the listeners and 100 more", fds, fdLimit/2)
			}
			testenv.Eventually(t, idle+time.Minute, "every idle connection closed by the server", func() bool { return closed.Load() == flood })
			dropped := fmt.Sprintf(`fieldwatch_http_connections_dropped_total{reason="evicted",server=%q}`, tc.server)
			// The others were closed by the idle timeout, during a flood
			// slower than it (TLS handshakes of a -race binary), or after.
			if v := p.metric(dropped); v < 1 {
				t.Errorf("%v connections evicted", v)
			}
			if v := p.metric(fmt.Sprintf(`fieldwatch_http_connections{server=%q}`, tc.server)); v > 2 {
				t.Errorf("%v connections open once the idle ones timed out", v)
			}
		})
	}
}

// TestAuditLogNotARegularFile: an --audit-log naming a symlink to
// /dev/zero, or a FIFO, is refused (counted, logged) and looked at again
// on a timer; the FIFO replaced by a regular file is followed; either way
// SIGTERM stops fieldwatch within the grace period. Before, /dev/zero was
// read forever at full CPU, the FIFO blocked its open() (and never saw the
// regular file), and fieldwatch never exited on SIGTERM.
func TestAuditLogNotARegularFile(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	kc := env.WriteKubeconfig(t)
	rules := writeFile(t, "rules.yaml", defaultCMRules)
	for _, tc := range []struct {
		name    string
		make    func(path string) error
		replace bool // by a regular file, which is then followed
	}{
		{name: "a symlink to /dev/zero", make: func(path string) error { return os.Symlink("/dev/zero", path) }},
		{name: "a FIFO", make: func(path string) error { return syscall.Mkfifo(path, 0o600) }, replace: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			if err := tc.make(path); err != nil {
				t.Fatal(err)
			}
			p := startFieldwatch(t, kc, "--rules", rules, "--audit-log", path)
			testenv.Eventually(t, 30*time.Second, "the audit log refused and counted", func() bool {
				return p.metric(`fieldwatch_audit_log_open_failures_total{reason="not_regular"}`) >= 1
			})
			if !strings.Contains(p.logs(), "not a regular file") {
				t.Errorf("no log line says the audit log is not a regular file")
			}
			if tc.replace {
				tmp := path + ".new"
				if err := os.WriteFile(tmp, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, path); err != nil {
					t.Fatal(err)
				}
				testenv.Eventually(t, 30*time.Second, "the regular file followed", func() bool {
					return strings.Contains(p.logs(), `"msg":"audit log: following"`)
				})
			}
			signalled := time.Now()
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			if code := p.waitExit(10 * time.Second); code != 0 {
				t.Errorf("exit code %d after SIGTERM, want 0 within the 10s grace period", code)
			}
			t.Logf("exited %s after SIGTERM", time.Since(signalled).Round(time.Millisecond))
		})
	}
}

// floodSource returns the i-th of the flood's source addresses: loopback
// addresses of 127.0.0.0/8 other than 127.0.0.1, one per client, so that
// no per-source limit holds the flood back and the review client's
// bounds must.
func floodSource(i int) *net.TCPAddr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, byte(1+i/250), byte(1+i%250))}
}

// TestHistoryForgedTokenFlood: 300 clients, each from an address of its
// own, send the history API random bearer tokens for 40 s while a
// leader-elected fieldwatch (the default --kube-qps 50 and --kube-burst
// 100) runs: it keeps its Lease throughout (never logs that it lost it,
// the Lease names it at the end and was renewed during the flood) and
// delivers a ConfigMap change made during it; the flood is answered 401
// or 429 at once. Before, each forged token's TokenReview went through
// the client that renews the Lease: renewals waited behind them past the
// renew deadline and the leader exited about 11 s into the flood ("lost
// leadership").
func TestHistoryForgedTokenFlood(t *testing.T) {
	testenv.SkipShort(t, testenv.LoadTest) // a 40 s flood
	env := testenv.Shared(t)
	ns := namespace(t, env, "history-flood")
	kc := env.WriteKubeconfig(t)
	p := startFieldwatch(t, kc, "--rules", cmRules(t, ns), "--state-dir", t.TempDir(), "--leader-elect", "--leader-elect-namespace", ns,
		"--leader-elect-name", "fw", "--leader-elect-identity", "flooded")
	leaderOf(t, 30*time.Second, p)
	leases := env.Clientset(t).CoordinationV1().Leases(ns)
	before, err := leases.Get(context.Background(), "fw", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writes, writeSeconds := p.metric("fieldwatch_leader_lease_write_seconds_count"), p.metric("fieldwatch_leader_lease_write_seconds_sum")
	addr := p.httpAddr()

	const clients, flood = 300, 40 * time.Second
	ctx, stop := context.WithTimeout(context.Background(), flood)
	defer stop()
	var answered, refused, unauthorized, other atomic.Int64
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			dialer := &net.Dialer{LocalAddr: floodSource(i), Timeout: 5 * time.Second}
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			token := make([]byte, 24)
			for ctx.Err() == nil {
				_, _ = rand.Read(token)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/history", nil)
				req.Header.Set("Authorization", "Bearer "+hex.EncodeToString(token))
				resp, err := client.Do(req)
				if err != nil {
					continue // the flood's end cancels requests under way
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				answered.Add(1)
				switch resp.StatusCode {
				case http.StatusTooManyRequests:
					refused.Add(1)
				case http.StatusUnauthorized:
					unauthorized.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	// A change made during the flood is delivered.
	testenv.Eventually(t, flood/2, "the flood under way", func() bool { return answered.Load() >= 1000 })
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "during-the-flood"}, Data: map[string]string{"k": "v"}}
	if _, err := env.Clientset(t).CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitPayloadsIn(ns, 1, flood)
	wg.Wait()
	t.Logf("%d clients for %s: %d answers (%d 401, %d 429, %d other)", clients, flood, answered.Load(), unauthorized.Load(), refused.Load(), other.Load())
	if other.Load() > 0 || refused.Load() == 0 {
		t.Errorf("%d answers other than 401 and 429, %d 429: the flood must be refused, at once", other.Load(), refused.Load())
	}
	if p.cmd.ProcessState != nil {
		t.Fatalf("fieldwatch exited during the flood")
	}
	for _, lost := range []string{"lost the Lease", "lost leadership", "failed to renew lease", "would exceed context deadline"} {
		if strings.Contains(p.logs(), lost) {
			t.Errorf("fieldwatch logged %q during the flood", lost)
		}
	}
	after, err := leases.Get(context.Background(), "fw", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Spec.HolderIdentity == nil || *after.Spec.HolderIdentity != *before.Spec.HolderIdentity || after.Spec.LeaseTransitions == nil ||
		*after.Spec.LeaseTransitions != *before.Spec.LeaseTransitions || !after.Spec.RenewTime.After(before.Spec.RenewTime.Time) {
		t.Errorf("the Lease before the flood: holder %v, transitions %v, renewed %v; after: %v, %v, %v", *before.Spec.HolderIdentity,
			before.Spec.LeaseTransitions, before.Spec.RenewTime, after.Spec.HolderIdentity, after.Spec.LeaseTransitions, after.Spec.RenewTime)
	}
	// Renewed throughout: a renewal comes every retry period (2 s) plus
	// its own time, and a leader that goes a renew deadline (10 s)
	// without one stops.
	renewed := p.metric("fieldwatch_leader_lease_write_seconds_count") - writes
	t.Logf("%v Lease writes during the flood, %.3f s on average", renewed,
		(p.metric("fieldwatch_leader_lease_write_seconds_sum")-writeSeconds)/max(renewed, 1))
	if renewed < float64(flood/app.DefaultRenewDeadline) {
		t.Errorf("%v Lease writes during the %s flood, want at least one every renew deadline (%s)", renewed, flood, app.DefaultRenewDeadline)
	}
	if strings.Contains(p.logs(), "webhook authenticator request") {
		t.Errorf("the refused reviews were logged one by one")
	}
	if p.metric("fieldwatch_leader ") != 1 {
		t.Errorf("fieldwatch does not lead after the flood")
	}
}
