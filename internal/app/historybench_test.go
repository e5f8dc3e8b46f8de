package app

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// The history API's benchmarks: requests a second for a caller it
// serves and for forged tokens it refuses, and the leader's Lease writes
// with no flood beside a flood of forged tokens, in one run. Each
// iteration is a window of benchWindow: make bench-go runs them with
// -benchtime 3x.

// benchWindow is how long each iteration of the history benchmarks runs.
const benchWindow = 10 * time.Second

// historyBench is a leader-elected fieldwatch, run in this process with
// the binary's client rate limits (--kube-qps 50, --kube-burst 100),
// keeping a history of ConfigMap changes in its namespace.
type historyBench struct {
	base, ns string
	reader   string // a token that may list the namespace's ConfigMaps
}

// historyBenches counts the benchmarks' fieldwatches: each has a
// namespace of its own.
var historyBenches atomic.Int64

// startHistoryBench starts a fieldwatch for the benchmark, stopped when
// it ends, and waits until it leads and its history holds 50 entries.
func startHistoryBench(b *testing.B) *historyBench {
	b.Helper()
	env := testenv.Shared(b)
	ns := fmt.Sprintf("bench-history-%d", historyBenches.Add(1))
	env.EnsureNamespace(b, ns)
	rulesFile := filepath.Join(b.TempDir(), "rules.yaml")
	rules := fmt.Sprintf("rules:\n  - name: cm\n    match: {resources: [{group: '', kind: ConfigMap}], namespaces: [%s]}\n    actions: [{log: {}}]\n", ns)
	if err := writeTestFile(rulesFile, rules); err != nil {
		b.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config())
	cfg.QPS, cfg.Burst = 50, 100
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{
			RulesFiles: []string{rulesFile}, Rest: cfg, HTTPAddr: "127.0.0.1:0", StateDir: b.TempDir(),
			LeaderElect: true, LeaseNamespace: ns, LeaseName: "bench", Identity: "bench", GracePeriod: 2 * time.Second,
			Stdout: io.Discard, Logger: slog.New(slog.DiscardHandler), Ready: func(a string) { addr <- a },
		})
	}()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	})
	h := &historyBench{base: "http://" + <-addr, ns: ns}
	testenv.Eventually(b, time.Minute, "the benchmark's fieldwatch to lead, its informers synced", func() bool {
		return scrape(b, h.base, "fieldwatch_leader") == 1 && get(h.base+"/readyz") == http.StatusOK
	})
	cms := env.Clientset(b).CoreV1().ConfigMaps(ns)
	for i := range 50 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}, Data: map[string]string{"i": strconv.Itoa(i)}}
		if _, err := cms.Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	h.reader = env.ServiceAccountToken(b, ns, "reader")
	env.GrantRead(b, ns, "reader", "", "configmaps", ns)
	testenv.Eventually(b, time.Minute, "50 entries in the history", func() bool {
		return scrape(b, h.base, `fieldwatch_history_entries_total{result="written"}`) >= 50
	})
	return h
}

// scrape returns the value of the sample of /metrics at base whose name
// and labels are exactly sample (NaN when absent).
func scrape(tb testing.TB, base, sample string) float64 {
	tb.Helper()
	v, ok := scrapeAll(tb, base)[sample]
	if !ok {
		return math.NaN()
	}
	return v
}

// scrapeAll returns every sample of /metrics at base.
func scrapeAll(tb testing.TB, base string) map[string]float64 {
	tb.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	out := map[string]float64{}
	s := bufio.NewScanner(resp.Body)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// flood sends the history API random bearer tokens from clients, each
// from a loopback address of its own (127.0.x.y), until ctx ends, and
// returns how many answers it got and how many of them were 401 or 429.
func flood(ctx context.Context, base string, clients int) (answers, refused *atomic.Int64, wait func()) {
	answers, refused = new(atomic.Int64), new(atomic.Int64)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, byte(1+i/250), byte(1+i%250))}, Timeout: 5 * time.Second}
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			token := make([]byte, 24)
			for ctx.Err() == nil {
				_, _ = rand.Read(token)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/history", nil)
				req.Header.Set("Authorization", "Bearer "+hex.EncodeToString(token))
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				answers.Add(1)
				if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusTooManyRequests {
					refused.Add(1)
				}
			}
		})
	}
	return answers, refused, wg.Wait
}

// BenchmarkHistoryAPI is the history API's requests a second, each
// iteration a window of benchWindow: "authorized", 16 clients of a
// service account that may list the ConfigMaps of the history's
// namespace asking for its 10 newest entries (its token and decisions
// cached once the first requests are answered, as for a caller that
// comes back; the answers that are not the 10 entries, 429 while the
// caches fill, are not counted); "forged", 64 clients from addresses of
// their own sending random tokens, each refused (401 once reviewed, 429
// past the review client's bounds).
func BenchmarkHistoryAPI(b *testing.B) {
	h := startHistoryBench(b)
	b.Run("authorized", func(b *testing.B) {
		path := h.base + "/api/v1/history?limit=10&namespace=" + h.ns
		var answers, ok atomic.Int64
		var took time.Duration
		for b.Loop() {
			ctx, stop := context.WithTimeout(context.Background(), benchWindow)
			start := time.Now()
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					client := &http.Client{Timeout: 10 * time.Second}
					for ctx.Err() == nil {
						req, _ := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
						req.Header.Set("Authorization", "Bearer "+h.reader)
						resp, err := client.Do(req)
						if err != nil {
							continue
						}
						body, _ := io.ReadAll(resp.Body)
						_ = resp.Body.Close()
						answers.Add(1)
						if resp.StatusCode == http.StatusOK && strings.Count(string(body), `"seq":`) == 10 {
							ok.Add(1)
						}
					}
				})
			}
			wg.Wait()
			took += time.Since(start)
			stop()
		}
		if ok.Load() < answers.Load()*9/10 {
			b.Fatalf("%d of %d answers were the 10 entries", ok.Load(), answers.Load())
		}
		b.ReportMetric(float64(ok.Load())/took.Seconds(), "requests/s")
	})
	b.Run("forged", func(b *testing.B) {
		var answered, refusedTotal int64
		var took time.Duration
		for b.Loop() {
			ctx, stop := context.WithTimeout(context.Background(), benchWindow)
			start := time.Now()
			answers, refused, wait := flood(ctx, h.base, 64)
			wait()
			took += time.Since(start)
			stop()
			answered += answers.Load()
			refusedTotal += refused.Load()
		}
		if refusedTotal != answered {
			b.Fatalf("%d of %d forged requests refused", refusedTotal, answered)
		}
		b.ReportMetric(float64(answered)/took.Seconds(), "requests/s")
	})
}

// BenchmarkLeaseRenewal is how long the leader's Lease writes take
// (fieldwatch_leader_lease_write_seconds: from when a renewal is sent,
// client-side rate limiting included), each iteration a window of
// benchWindow: "quiet", nothing else asked of the process; "flood", 300
// clients sending the history API random bearer tokens from addresses of
// their own. Renewals come every retry period (2 s) and a leader that
// goes its renew deadline (10 s) without one stops: it reports the mean
// write, the slowest bucket reached, and the writes a second.
func BenchmarkLeaseRenewal(b *testing.B) {
	h := startHistoryBench(b)
	for _, clients := range []int{0, 300} {
		name := "quiet"
		if clients > 0 {
			name = "flood"
		}
		b.Run(name, func(b *testing.B) {
			before := scrapeAll(b, h.base)
			var took time.Duration
			var answered int64
			for b.Loop() {
				ctx, stop := context.WithTimeout(context.Background(), benchWindow)
				start := time.Now()
				wait := func() { <-ctx.Done() }
				var answers *atomic.Int64
				if clients > 0 {
					answers, _, wait = flood(ctx, h.base, clients)
				}
				wait()
				took += time.Since(start)
				stop()
				if answers != nil {
					answered += answers.Load()
				}
			}
			after := scrapeAll(b, h.base)
			const metric = "fieldwatch_leader_lease_write_seconds"
			n := after[metric+"_count"] - before[metric+"_count"]
			if n == 0 || after["fieldwatch_leader"] != 1 {
				b.Fatalf("%v Lease writes; leader %v", n, after["fieldwatch_leader"])
			}
			// The slowest: the lowest bucket that holds every write of the
			// window.
			slowest := math.Inf(1)
			for sample, v := range after {
				le, ok := strings.CutPrefix(sample, metric+`_bucket{le="`)
				if !ok || v-before[sample] < n {
					continue
				}
				if bound, err := strconv.ParseFloat(strings.TrimSuffix(le, `"}`), 64); err == nil && bound < slowest {
					slowest = bound
				}
			}
			b.ReportMetric((after[metric+"_sum"]-before[metric+"_sum"])/n*1000, "mean-ms")
			b.ReportMetric(slowest*1000, "max-bucket-ms")
			b.ReportMetric(n/took.Seconds(), "writes/s")
			if clients > 0 {
				b.ReportMetric(float64(answered)/took.Seconds(), "flood-requests/s")
			}
		})
	}
}
