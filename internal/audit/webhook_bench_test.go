package audit

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// groupsEventList is an EventList of one event whose user has n empty
// groups: 3 bytes of JSON each.
func groupsEventList(n int) []byte {
	var b bytes.Buffer
	b.Grow(3*n + 512)
	b.WriteString(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"level":"Metadata","auditID":"groups","stage":"ResponseComplete","verb":"patch",` +
		`"objectRef":{"resource":"configmaps","namespace":"ns","name":"a","apiVersion":"v1"},"responseStatus":{"code":200},` +
		`"requestReceivedTimestamp":"2026-12-03T12:00:00.000000Z","stageTimestamp":"2026-12-03T12:00:00.001000Z","user":{"username":"x","groups":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`""`)
	}
	b.WriteString(`]}}]}`)
	return b.Bytes()
}

// smallEvents streams an EventList of n small successful writes, each
// with an auditID of its own: the most events a body of its size holds.
type smallEvents struct {
	n, i, base int
	buf        []byte
}

func (s *smallEvents) Read(p []byte) (int, error) {
	for len(s.buf) < len(p) && s.i <= s.n {
		switch s.i {
		case 0:
			s.buf = append(s.buf, `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[`...)
		case s.n:
			s.buf = append(s.buf, `]}`...)
		default:
			if s.i > 1 {
				s.buf = append(s.buf, ',')
			}
			s.buf = append(s.buf, `{"auditID":"`...)
			s.buf = strconv.AppendInt(s.buf, int64(s.base+s.i), 36)
			s.buf = append(s.buf, `","stage":"ResponseComplete","verb":"create","user":{"username":"u"},"objectRef":{"resource":"configmaps","namespace":"ns","name":"o`...)
			s.buf = strconv.AppendInt(s.buf, int64(s.i), 36)
			s.buf = append(s.buf, `"},"responseStatus":{"code":201}}`...)
		}
		s.i++
	}
	if len(s.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.buf)
	s.buf = s.buf[:copy(s.buf, s.buf[n:])]
	return n, nil
}

// heapObjects reads the bytes of live and unswept heap objects without
// stopping the world.
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// peakRSS resets the kernel's high-water mark of the resident set (Linux:
// /proc/self/clear_refs) and returns a function that reads the peak since,
// in bytes; ok is false where that is not available.
func peakRSS() (read func() uint64, ok bool) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return nil, false
	}
	return func() uint64 {
		f, err := os.Open("/proc/self/status")
		if err != nil {
			return 0
		}
		defer func() { _ = f.Close() }()
		s := bufio.NewScanner(f)
		for s.Scan() {
			if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				return kb << 10
			}
		}
		return 0
	}, true
}

// BenchmarkWebhookMemory posts the bodies that amplify memory to a real
// receiver (token authentication, the default limits, a default Index)
// and reports the peak heap while they are read (sampled every
// millisecond), the peak resident set where Linux tells it, and the heap
// still held once they were answered: one event of 10 million empty
// groups (30 MB) alone and four at once, four of 1.3 million (4 MB) at
// once, a body of a million small events (over the 32 MiB limit), one of
// 150,000 (26 MB, under it), four of 19,000 at once (what a request may
// keep) and forty of them, four at a time (more than the index holds).
func BenchmarkWebhookMemory(b *testing.B) {
	groups := groupsEventList(10_000_000)
	fewerGroups := groupsEventList(1_300_000) // under 4 MiB
	for _, tc := range []struct {
		name     string
		parallel int
		posts    int // one after the other, by each
		body     func() io.Reader
	}{
		{"groups", 1, 1, func() io.Reader { return bytes.NewReader(groups) }},
		{"groups-x4", 4, 1, func() io.Reader { return bytes.NewReader(groups) }},
		{"1.3M-groups-x4", 4, 1, func() io.Reader { return bytes.NewReader(fewerGroups) }},
		{"1M-small-events", 1, 1, func() io.Reader { return &smallEvents{n: 1_000_000} }},
		{"150k-small-events", 1, 1, func() io.Reader { return &smallEvents{n: 150_000} }},
		{"19k-small-events-x4", 4, 1, func() io.Reader { return &smallEvents{n: 19_000} }},
		{"19k-small-events-x4-x10", 4, 10, func() io.Reader { return &smallEvents{n: 19_000} }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var peakHeap, peakRSSBytes, held, counted float64
			codes := map[int]int{}
			for b.Loop() {
				p := newWebhookPKI(b, b.TempDir())
				ix := NewIndex(IndexOptions{})
				w, err := NewWebhook(WebhookOptions{CertFile: p.certFile, KeyFile: p.keyFile, TokenFile: p.tokenFile, Logger: slog.New(slog.DiscardHandler)}, ix)
				if err != nil {
					b.Fatal(err)
				}
				url := serveWebhook(b, w)
				clients := make([]*http.Client, tc.parallel)
				for i := range clients {
					clients[i] = httpsClient(b, p.ca.CertPEM, nil, nil)
					clients[i].Timeout = 5 * time.Minute
				}
				runtime.GC()
				debug.FreeOSMemory()
				base := heapObjects()
				rss, haveRSS := peakRSS()
				var baseRSS uint64
				if haveRSS {
					baseRSS = rss()
				}
				stop := make(chan struct{})
				sampled := make(chan uint64)
				go func() {
					peak := base
					t := time.NewTicker(time.Millisecond)
					defer t.Stop()
					for {
						select {
						case <-stop:
							sampled <- peak
							return
						case <-t.C:
							peak = max(peak, heapObjects())
						}
					}
				}()
				var wg sync.WaitGroup
				var mu sync.Mutex
				for j, c := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for k := range tc.posts {
							body := tc.body()
							if s, ok := body.(*smallEvents); ok {
								s.i, s.base = 0, (j*tc.posts+k)*s.n // auditIDs of their own
							}
							req, err := http.NewRequest(http.MethodPost, url, body)
							if err != nil {
								b.Error(err)
								return
							}
							req.Header.Set("Authorization", "Bearer "+p.token)
							resp, err := c.Do(req)
							if err != nil {
								b.Error(err)
								return
							}
							_, _ = io.Copy(io.Discard, resp.Body)
							_ = resp.Body.Close()
							mu.Lock()
							codes[resp.StatusCode]++
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				close(stop)
				peakHeap = float64(<-sampled - base)
				if haveRSS {
					peakRSSBytes = float64(rss() - baseRSS)
				}
				runtime.GC()
				held = float64(int64(heapObjects()) - int64(base))
				counted = float64(ix.Bytes())
				b.Logf("%s: responses %v, %d events held", tc.name, codes, ix.Len())
				runtime.KeepAlive(ix)
			}
			b.ReportMetric(peakHeap/(1<<20), "peak-heap-MiB")
			if peakRSSBytes > 0 {
				b.ReportMetric(peakRSSBytes/(1<<20), "peak-rss-MiB")
			}
			b.ReportMetric(held/(1<<20), "held-MiB")
			b.ReportMetric(counted/(1<<20), "counted-MiB")
			b.ReportMetric(0, "ns/op")
		})
	}
}
