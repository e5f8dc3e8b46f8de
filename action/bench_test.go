package action

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// benchDispatcher is a Dispatcher as the command builds it: quiet logger,
// default workers and queue.
func benchDispatcher(b *testing.B) *Dispatcher {
	b.Helper()
	d, err := New(Options{
		Logger:     slog.New(slog.DiscardHandler),
		Registerer: prometheus.NewRegistry(),
		StateDir:   b.TempDir(),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = d.Close(ctx)
	})
	return d
}

// drain delivers n firings of r as fast as Deliver takes them (a backlog)
// and returns the firings per second, first Deliver to last done.
func drain(b *testing.B, d *Dispatcher, r *rules.Rule, n int) float64 {
	b.Helper()
	firings := make([]rules.Firing, n)
	for i := range firings {
		firings[i] = newFiring(r)
	}
	return drainFirings(b, d, firings)
}

// drainFirings is drain of the firings given.
func drainFirings(b *testing.B, d *Dispatcher, firings []rules.Firing) float64 {
	b.Helper()
	n := len(firings)
	var left sync.WaitGroup
	left.Add(n)
	ctx := context.Background()
	start := time.Now()
	for _, f := range firings {
		if err := d.Deliver(ctx, f, left.Done); err != nil {
			b.Fatal(err)
		}
	}
	left.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkLog: firings per second through the log action to a file.
func BenchmarkLog(b *testing.B) {
	d := benchDispatcher(b)
	r := &rules.Rule{Name: "bench-log", Actions: []rules.Action{{Log: &rules.LogAction{File: filepath.Join(b.TempDir(), "firings.jsonl")}}}}
	b.ResetTimer()
	rate := drain(b, d, r, b.N)
	b.ReportMetric(rate, "firings/s")
}

// BenchmarkCloudEvents: the attributes of one firing's CloudEvent, and
// its structured-mode document (binary mode: the headers), for a small
// payload and one of about 4 KB.
func BenchmarkCloudEvents(b *testing.B) {
	r := &rules.Rule{Name: "bench-ce"}
	small := newFiring(r)
	large := newFiring(r)
	large.Payload = fmt.Appendf(bytes.TrimSuffix(large.Payload, []byte("}")), `,"object":{"data":{"x":%q}}}`, strings.Repeat("x", 4000))
	for _, f := range []struct {
		name string
		f    rules.Firing
	}{{"small", small}, {"4KB", large}} {
		b.Run(f.name+"/structured", func(b *testing.B) {
			c := newCloudEvents(&rules.CloudEvents{})
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.structured(&f.f, f.f.Payload); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(f.name+"/binary", func(b *testing.B) {
			c := newCloudEvents(&rules.CloudEvents{Mode: rules.CloudEventsBinary})
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				c.headers(&f.f, "ce-", func(k, v string) { n += len(v) })
			}
			if n == 0 {
				b.Fatal("no headers")
			}
		})
	}
}

// benchReceiver is a minimal local webhook receiver: it reads the body and
// answers 200, calling seen with the idempotency key.
func benchReceiver(b *testing.B, seen func(id string)) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if seen != nil {
			seen(r.Header.Get("Idempotency-Key"))
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/hook"
}

// BenchmarkWebhook: firings per second through the webhook action to a
// local receiver, draining a backlog (receiver in the same process, so
// sharing the CPUs).
func BenchmarkWebhook(b *testing.B) {
	url := benchReceiver(b, nil)
	d := benchDispatcher(b)
	r := webhookRule("bench-webhook", &rules.WebhookAction{URL: url})
	drain(b, d, r, 2000) // warm the connection pool
	b.ResetTimer()
	rate := drain(b, d, r, b.N)
	b.ReportMetric(rate, "firings/s")
}

// BenchmarkWebhook4KB: firings per second, CPU time and allocations per
// POST of a payload of about 4 KB through the webhook action, to a
// receiver in a process of its own (Go's net/http server), so that the CPU
// and allocations are this process's: the dispatcher's and the client's.
// Side by side in one run, over plain HTTP: net/http's Transport with Go's
// default write buffer (4 KiB), tuned as fieldwatch builds it
// (httpClients: idle connections for every worker, a 16 KiB write
// buffer), the same speaking HTTP/2 with prior knowledge, and the direct
// client (package directhttp); over TLS: the tuned Transport held to HTTP/1.1, the
// same speaking HTTP/2 (ALPN), and the direct client. Compare with
// `benchstat -col /client`.
func BenchmarkWebhook4KB(b *testing.B) {
	ours := webhookWriteBuffer
	defer func() { webhookWriteBuffer, directPosts = ours, true }()
	h1, h2c := new(http.Protocols), new(http.Protocols)
	h1.SetHTTP1(true)
	h2c.SetUnencryptedHTTP2(true)
	for _, bc := range []struct {
		name      string
		tls       bool
		buffer    int
		direct    bool
		protocols *http.Protocols // nil: the Transport's own
	}{
		{"proto=http/client=net-http-4KiB-buffer", false, 4 << 10, false, nil},
		{"proto=http/client=net-http-tuned", false, ours, false, nil},
		{"proto=http/client=net-http-tuned-h2", false, ours, false, h2c},
		{"proto=http/client=direct", false, ours, true, nil},
		{"proto=https/client=net-http-tuned", true, ours, false, h1},
		{"proto=https/client=net-http-tuned-h2", true, ours, false, nil},
		{"proto=https/client=direct", true, ours, true, nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			webhookWriteBuffer, directPosts = bc.buffer, bc.direct
			url, caFile := startReceiverProcess(b, bc.tls)
			d := benchDispatcher(b)
			if bc.protocols != nil {
				cl, err := d.clients.get(tlsFiles{ca: caFile})
				if err != nil {
					b.Fatal(err)
				}
				cl.Transport.(*http.Transport).Protocols = bc.protocols
			}
			r := webhookRule("bench-webhook-4kb", &rules.WebhookAction{URL: url, CAFile: caFile})
			padded := func(n int) []rules.Firing {
				firings := make([]rules.Firing, n)
				for i := range firings {
					firings[i] = newFiring(r)
					firings[i].Payload = fmt.Appendf(nil, `{"id":%q,"changes":[{"op":"replace","path":"/data/counter","value":%q}]}`, firings[i].ID, strings.Repeat("x", 4000))
				}
				return firings
			}
			drainFirings(b, d, padded(500)) // connect, warm up
			firings := padded(b.N)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime(b)
			rate := drainFirings(b, d, firings)
			used := cpuTime(b) - cpu
			b.StopTimer()
			b.ReportMetric(rate, "firings/s")
			b.ReportMetric(float64(used.Microseconds())/float64(b.N), "cpu-µs/payload")
		})
	}
}

// maxWebhookRate is the drain rate BenchmarkWebhookLatency paces against,
// measured once per process.
var (
	maxWebhookRateOnce sync.Once
	maxWebhookRate     float64
)

func measureMaxWebhookRate(b *testing.B) float64 {
	maxWebhookRateOnce.Do(func() {
		url := benchReceiver(b, nil)
		d := benchDispatcher(b)
		r := webhookRule("bench-max", &rules.WebhookAction{URL: url})
		drain(b, d, r, 2000)
		maxWebhookRate = drain(b, d, r, 30000)
	})
	return maxWebhookRate
}

// BenchmarkWebhookLatency: the time from Deliver to the receiver getting
// the request, at half the webhook's maximum rate, as p50 and p99.
func BenchmarkWebhookLatency(b *testing.B) {
	rate := measureMaxWebhookRate(b) / 2
	var mu sync.Mutex
	sent := map[string]time.Time{}
	var latencies []time.Duration
	var got atomic.Int64
	url := benchReceiver(b, func(id string) {
		now := time.Now()
		mu.Lock()
		latencies = append(latencies, now.Sub(sent[id]))
		mu.Unlock()
		got.Add(1)
	})
	d := benchDispatcher(b)
	r := webhookRule("bench-latency", &rules.WebhookAction{URL: url})
	drain(b, d, r, 2000)
	mu.Lock()
	latencies = latencies[:0]
	mu.Unlock()
	got.Store(0)

	n := max(b.N, 1000)
	firings := make([]rules.Firing, n)
	for i := range firings {
		firings[i] = newFiring(r)
	}
	interval := time.Duration(float64(time.Second) / rate)
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for i, f := range firings {
		// Pace by the clock, not by sleeping per firing, so that
		// oversleeping is caught up on: the rate is what is measured,
		// no condition to wait for.
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		mu.Lock()
		sent[f.ID] = time.Now()
		mu.Unlock()
		if err := d.Deliver(ctx, f, nil); err != nil {
			b.Fatal(err)
		}
	}
	// Polled every millisecond: the benchmark's timer runs meanwhile.
	if err := testenv.Wait(ctx, time.Millisecond, 5*time.Minute, "every firing delivered", func() bool { return got.Load() >= int64(n) }); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return float64(latencies[int(p*float64(len(latencies)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(rate, "paced-firings/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSinks puts the event-bus actions beside the webhook in one
// run: each drains b.N payloads (a backlog) into its receiver in the same
// process (a webhook receiver, an embedded JetStream server on file
// storage, a kfake cluster), reporting payloads/s and the CPU per payload
// of the whole process, receiver included. backlog-5000 is the drain of
// 5,000 payloads queued at once into JetStream (b.N backlogs, one after
// the other: run it with -benchtime Nx).
func BenchmarkSinks(b *testing.B) {
	run := func(b *testing.B, r *rules.Rule) {
		d := benchDispatcher(b)
		drain(b, d, r, 500) // connect, warm up
		b.ResetTimer()
		cpu := cpuTime(b)
		rate := drain(b, d, r, b.N)
		used := cpuTime(b) - cpu
		b.ReportMetric(rate, "payloads/s")
		b.ReportMetric(float64(used.Microseconds())/float64(b.N), "cpu-µs/payload")
	}
	b.Run("webhook", func(b *testing.B) {
		run(b, webhookRule("bench-sink-webhook", &rules.WebhookAction{URL: benchReceiver(b, nil)}))
	})
	b.Run("nats-jetstream", func(b *testing.B) {
		srv := startJetStream(b)
		srv.stream(b)
		b.Setenv("FW_NATS_TOKEN", natsTestToken)
		run(b, natsRule("bench-sink-nats", &rules.NATSAction{URL: srv.url(), Subject: mustTemplate(b, "fw.widgets"), Stream: "FW", TokenEnv: "FW_NATS_TOKEN"}))
	})
	b.Run("kafka-kfake", func(b *testing.B) {
		k := startKafka(b, "fw.widgets")
		b.Setenv("FW_KAFKA_PASSWORD", kafkaTestPassword)
		run(b, kafkaRule("bench-sink-kafka", &rules.KafkaAction{
			Brokers: []string{k.addr()}, Topic: mustTemplate(b, "fw.widgets"),
			SASL: &rules.KafkaSASL{Mechanism: "PLAIN", Username: "fieldwatch", PasswordEnv: "FW_KAFKA_PASSWORD"},
		}))
	})
	b.Run("nats-jetstream-backlog-5000", func(b *testing.B) {
		srv := startJetStream(b)
		srv.stream(b)
		b.Setenv("FW_NATS_TOKEN", natsTestToken)
		d := benchDispatcher(b)
		r := natsRule("bench-sink-backlog", &rules.NATSAction{URL: srv.url(), Subject: mustTemplate(b, "fw.widgets"), Stream: "FW", TokenEnv: "FW_NATS_TOKEN"})
		drain(b, d, r, 100)
		b.ResetTimer()
		cpu := cpuTime(b)
		start := time.Now()
		for range b.N {
			drain(b, d, r, 5000)
		}
		b.ReportMetric(float64(5000*b.N)/time.Since(start).Seconds(), "payloads/s")
		used := cpuTime(b) - cpu
		b.ReportMetric(float64(used.Microseconds())/float64(5000*b.N), "cpu-µs/payload")
	})
}
