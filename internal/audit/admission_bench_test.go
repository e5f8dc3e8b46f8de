package audit

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// discardSink takes records and keeps none.
type discardSink struct{}

func (discardSink) Add(string, []Record, int) {}

// benchReview is the review of an update of a 4 KB ConfigMap by a
// service account (its object and oldObject, managedFields, the token's
// extra), as kube-apiserver sends it.
func benchReview(b testing.TB, i int) []byte {
	obj := benchObjectJSON(fmt.Sprint(i+1), "new")
	old := benchObjectJSON(fmt.Sprint(i), "old")
	req := request(admissionv1.Update, "system:serviceaccount:ci:deployer", obj, old)
	req.UID = types.UID(fmt.Sprintf("bench-%d", i))
	return reviewOf(b, req)
}

// benchObjectJSON is a ConfigMap of about 4 KB at resourceVersion rv.
func benchObjectJSON(rv, value string) []byte {
	var data bytes.Buffer
	for i := range 40 {
		if i > 0 {
			data.WriteByte(',')
		}
		fmt.Fprintf(&data, `"key-%02d":"%s %s"`, i, value, bytes.Repeat([]byte("x"), 80))
	}
	return []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"n","uid":"0b7c7a2e-8a0e-4d5e-9f8e-1c2d3e4f5a6b","resourceVersion":"` + rv +
		`","creationTimestamp":"2026-12-03T12:00:00Z","labels":{"app":"bench","tier":"backend"},"managedFields":[{"manager":"kubectl","operation":"Update","apiVersion":"v1",` +
		`"time":"2026-12-03T12:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:key-00":{}}}}]},"data":{` + data.String() + `}}`)
}

// processCPU is the CPU time this process has used, all threads.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAdmissionReview is the CPU one review costs the endpoint, by
// what it covers: decode (reading the review and making its record: the
// scan of both objects and the content hash of the new one), handler
// (ServeHTTP: the body read, the record queued, the answer written), and
// https (a keep-alive HTTPS POST on loopback: TLS, net/http, the client's
// share too; cpu-us/op is the whole process's CPU). Beside them, the
// audit webhook's handler taking one event, the fair peer per write.
func BenchmarkAdmissionReview(b *testing.B) {
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i] = benchReview(b, i)
	}
	b.Logf("a review of %d bytes", len(bodies[0]))
	p := newWebhookPKI(b, b.TempDir())
	newAdm := func() *Admission {
		a, err := NewAdmission(AdmissionOptions{CertFile: p.certFile, KeyFile: p.keyFile, Logger: slog.New(slog.DiscardHandler)}, discardSink{})
		if err != nil {
			b.Fatal(err)
		}
		return a
	}
	cpu := func(b *testing.B, since time.Duration) {
		b.ReportMetric(float64((processCPU()-since).Microseconds())/float64(b.N), "cpu-us/op")
	}
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		start := processCPU()
		i := 0
		for b.Loop() {
			rv, err := decodeReview(bodies[i%len(bodies)])
			if err != nil {
				b.Fatal(err)
			}
			if _, result, err := recordOf(&rv, nil, t0); err != nil || result != reviewKept {
				b.Fatal(result, err)
			}
			i++
		}
		cpu(b, start)
	})
	b.Run("handler", func(b *testing.B) {
		a := newAdm()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go a.feed(ctx)
		b.ReportAllocs()
		start := processCPU()
		i := 0
		for b.Loop() {
			rw := httptest.NewRecorder()
			a.ServeHTTP(rw, httptest.NewRequest(http.MethodPost, AdmissionPath, bytes.NewReader(bodies[i%len(bodies)])))
			if rw.Code != http.StatusOK {
				b.Fatal(rw.Code, rw.Body.String())
			}
			i++
		}
		cpu(b, start)
	})
	b.Run("https", func(b *testing.B) {
		url := serveAdmission(b, newAdm()) + AdmissionPath
		c := httpsClient(b, p.ca.CertPEM, nil, nil)
		post(b, c, url, bodies[0]) // the handshake
		b.ReportAllocs()
		start := processCPU()
		i := 0
		for b.Loop() {
			if code, _ := post(b, c, url, bodies[i%len(bodies)]); code != http.StatusOK {
				b.Fatal(code)
			}
			i++
		}
		cpu(b, start)
	})
	b.Run("audit-webhook-handler-1-event", func(b *testing.B) {
		w, err := NewWebhook(WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile, TokenFile: p.tokenFile, Logger: slog.New(slog.DiscardHandler)}, discardSink{})
		if err != nil {
			b.Fatal(err)
		}
		lines := readLines(b, apiserverLog)
		body := eventList(lines[2:3])
		b.ReportAllocs()
		start := processCPU()
		for b.Loop() {
			rw := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+p.token)
			w.ServeHTTP(rw, req)
			if rw.Code != http.StatusOK {
				b.Fatal(rw.Code, rw.Body.String())
			}
		}
		cpu(b, start)
	})
}

// BenchmarkAdmissionMemory holds 10,000 pending admission records (of
// 10,000 objects, by 20 service accounts with their tokens' extra) and
// reports the heap they take: per record, in all, and what the index
// counts them for against AdmissionMaxBytes.
func BenchmarkAdmissionMemory(b *testing.B) {
	const n = 10000
	recs := make([]Record, n)
	for i := range recs {
		rv, err := decodeReview(benchReview(b, i))
		if err != nil {
			b.Fatal(err)
		}
		rv.user.Username = fmt.Sprintf("system:serviceaccount:ci:deployer-%d", i%20)
		rv.user.Extra = map[string][]string{"authentication.kubernetes.io/credential-id": {fmt.Sprintf("JTI=%d", i%20)},
			"authentication.kubernetes.io/pod-name": {fmt.Sprintf("runner-%d", i%20)}}
		if recs[i], _, err = recordOf(&rv, nil, t0); err != nil {
			b.Fatal(err)
		}
		recs[i].ObjectUID = fmt.Sprintf("0b7c7a2e-8a0e-4d5e-9f8e-%012d", i)
		recs[i].Name = fmt.Sprintf("config-%d", i)
	}
	var per, total, counted float64
	for b.Loop() {
		batch := slices.Clone(recs)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ix := NewIndex(IndexOptions{Clock: newFakeClock(), AdmissionMaxPending: n})
		for i := 0; i < n; i += 256 {
			ix.Add(SourceAdmission, batch[i:min(i+256, n)], 0)
		}
		clear(batch)
		runtime.GC()
		runtime.ReadMemStats(&after)
		held, bytes := ix.Pending()
		if held != n {
			b.Fatalf("held %d, want %d", held, n)
		}
		total = float64(after.HeapAlloc) - float64(before.HeapAlloc)
		per = total / n
		counted = float64(bytes) / n
		runtime.KeepAlive(ix)
	}
	b.ReportMetric(per, "bytes/record")
	b.ReportMetric(counted, "counted-bytes/record")
	b.ReportMetric(total/(1<<20), "MiB/10k-pending")
}

// pacedWrites calls write n times at rate a second, each on a goroutine
// of its own (an open loop: a slow write does not slow the next), and
// returns each call's latency in the order they started.
func pacedWrites(n int, rate float64, write func(i int) error) ([]time.Duration, error) {
	lat := make([]time.Duration, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for i := range n {
		<-tick.C
		wg.Go(func() {
			began := time.Now()
			if err := write(i); err != nil {
				errs <- err
			}
			lat[i] = time.Since(began)
		})
	}
	wg.Wait()
	close(errs)
	return lat, <-errs
}

// quantile returns the q quantile of ds (which it sorts).
func quantile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// BenchmarkAdmissionWriteLatency is the apiserver's write latency with
// fieldwatch's webhook registered against without it, side by side: each
// iteration patches one ConfigMap in a namespace the webhook selects and
// one in a namespace it does not, at 200 writes a second each, and the
// p50 and p99 of both are reported, and the ratio of the p99s.
func BenchmarkAdmissionWriteLatency(b *testing.B) {
	env := testenv.Shared(b)
	ix := NewIndex(IndexOptions{})
	startAdmission(b, env, ix, "latency", AdmissionOptions{})
	const with, without = "adm-latency", "adm-latency-off"
	labelledNamespace(b, env, with, "latency")
	env.EnsureNamespace(b, without)
	ctx := context.Background()
	cms := map[string]dynamic.ResourceInterface{}
	for _, ns := range []string{with, without} {
		cms[ns] = env.Dynamic(b).Resource(configmaps).Namespace(ns)
		for i := range 16 {
			if _, err := cms[ns].Create(ctx, configMap(fmt.Sprintf("cm-%d", i), map[string]any{"v": "0"}), metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	var lat [2][]time.Duration
	for b.Loop() {
		const n = 400 // two seconds at 200 writes/s
		got, err := pacedWrites(2*n, 400, func(i int) error {
			ns := []string{with, without}[i%2]
			_, err := cms[ns].Patch(ctx, fmt.Sprintf("cm-%d", (i/2)%16), types.MergePatchType, fmt.Appendf(nil, `{"data":{"v":"%d"}}`, i), metav1.PatchOptions{})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		for i, d := range got {
			lat[i%2] = append(lat[i%2], d)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	p99With, p99Without := quantile(lat[0], 0.99), quantile(lat[1], 0.99)
	b.ReportMetric(ms(quantile(lat[0], 0.5)), "with-p50-ms")
	b.ReportMetric(ms(p99With), "with-p99-ms")
	b.ReportMetric(ms(quantile(lat[1], 0.5)), "without-p50-ms")
	b.ReportMetric(ms(p99Without), "without-p99-ms")
	b.ReportMetric(float64(p99With)/float64(p99Without), "p99-ratio")
}

// BenchmarkWriteToAttributed is the time from a write to its change's
// attribution at 100 writes a second, from admission and, beside it, from
// the audit webhook (the shared control plane sends its audit batches
// every 100 ms, the README's advice being about 1 s): p50 and p99 from
// the write's start to the Attributor's callback.
func BenchmarkWriteToAttributed(b *testing.B) {
	env := testenv.Shared(b)
	for _, source := range []string{"admission", "audit-webhook"} {
		b.Run(source, func(b *testing.B) {
			ns := "adm-e2a-" + source
			ix := NewIndex(IndexOptions{})
			at := NewAttributor(ix, AttributorOptions{Wait: 10 * time.Second})
			b.Cleanup(at.Close)
			if source == "admission" {
				startAdmission(b, env, ix, "e2a", AdmissionOptions{})
				labelledNamespace(b, env, ns, "e2a")
			} else {
				receiver.use(b, ix)
				env.EnsureNamespace(b, ns)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			alice := env.Impersonating(b, "alice").Dynamic.Resource(configmaps).Namespace(ns)
			for i := range 16 {
				if _, err := alice.Create(ctx, configMap(fmt.Sprintf("cm-%d", i), map[string]any{"v": "0"}), metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			o := observeHashed(b, ctx, env, at, configmaps, ns, nil, nil)
			o.waitResolved(b, 16, 30*time.Second)
			var mu sync.Mutex
			started := map[string]time.Time{}
			var lat []time.Duration
			for b.Loop() {
				const n = 200 // two seconds at 100 writes/s
				before := len(o.snapshot())
				_, err := pacedWrites(n, 100, func(i int) error {
					began := time.Now()
					obj, err := alice.Patch(ctx, fmt.Sprintf("cm-%d", i%16), types.MergePatchType, fmt.Appendf(nil, `{"data":{"v":"%d-%d"}}`, i, before), metav1.PatchOptions{})
					if err == nil {
						mu.Lock()
						started[obj.GetName()+"/"+obj.GetResourceVersion()] = began
						mu.Unlock()
					}
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				for _, c := range o.waitResolved(b, before+n, time.Minute)[before:] {
					if c.result.Match != change.MatchExact && c.result.Match != change.MatchWindow {
						b.Fatalf("%s/%s: %+v", c.Name, c.ResourceVersion, c.result)
					}
					mu.Lock()
					lat = append(lat, c.resolved.Sub(started[c.Name+"/"+c.ResourceVersion]))
					mu.Unlock()
				}
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(ms(quantile(lat, 0.5)), "p50-ms")
			b.ReportMetric(ms(quantile(lat, 0.99)), "p99-ms")
		})
	}
}
