package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// microTime is the apiserver's timestamp format (metav1.MicroTime).
const microTime = "2006-01-02T15:04:05.000000Z07:00"

// benchEvent returns a Metadata-level patch event line like the
// apiserver's (impersonation, groups, user agent, source IP) for object
// name by user, with a unique auditID.
func benchEvent(b testing.TB, i int, name, user string, at time.Time) []byte {
	b.Helper()
	ev := map[string]any{
		"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
		"auditID": fmt.Sprintf("%08x-1b2c-4d5e-8f90-%012x", i, i), "stage": "ResponseComplete",
		"requestURI": "/api/v1/namespaces/shop/configmaps/" + name, "verb": "patch",
		"user": map[string]any{"username": "admin", "groups": []string{"system:masters", "system:authenticated"},
			"extra": map[string]any{"authentication.kubernetes.io/credential-id": []string{"X509SHA256=00ef62577f47a87a278adbb52e1eb1f0db4559f749d79a233ef93916bb1e2961"}}},
		"impersonatedUser": map[string]any{"username": user, "groups": []string{"devs", "system:authenticated"}},
		"sourceIPs":        []string{"10.1.2.3"}, "userAgent": "kubectl/v1.37.2 (linux/amd64) kubernetes/abcdef0",
		"objectRef":                map[string]any{"resource": "configmaps", "namespace": "shop", "name": name, "apiVersion": "v1"},
		"responseStatus":           map[string]any{"metadata": map[string]any{}, "code": 200},
		"requestReceivedTimestamp": at.Add(-3 * time.Millisecond).UTC().Format(microTime),
		"stageTimestamp":           at.UTC().Format(microTime),
		"annotations":              map[string]string{"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""},
	}
	out, err := json.Marshal(ev)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchmarkIndexMemory holds the events of 1,000 writes a second for the
// default maximum age (30,000 events on 3,000 objects by 20 users) and
// reports the heap they take, per event: the records, their strings and
// the index's maps; and what the index counts them for against MaxBytes
// (more: it counts no string as shared).
func BenchmarkIndexMemory(b *testing.B) {
	const rate = 1000
	n := rate * int(DefaultMaxAge/time.Second)
	lines := make([][]byte, n)
	for i := range lines {
		lines[i] = benchEvent(b, i, fmt.Sprintf("config-%d", i%3000), fmt.Sprintf("user-%d", i%20), t0.Add(time.Duration(i)*time.Millisecond))
	}
	var perEvent, total, counted float64
	for b.Loop() {
		clk := newFakeClock()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ix := NewIndex(IndexOptions{Clock: clk})
		batch := make([]Record, 0, 100)
		for i, l := range lines {
			rec, keep, err := DecodeEvent(l)
			if err != nil || !keep {
				b.Fatalf("line %d: keep %v, %v", i, keep, err)
			}
			batch = append(batch, rec)
			if len(batch) == cap(batch) {
				ix.Add(SourceWebhook, batch, 0)
				clk.Step(time.Duration(len(batch)) * time.Second / rate)
				batch = batch[:0]
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if ix.Len() != n {
			b.Fatalf("held %d, want %d", ix.Len(), n)
		}
		total = float64(after.HeapAlloc) - float64(before.HeapAlloc)
		perEvent = total / float64(n)
		counted = float64(ix.Bytes()) / float64(n)
		runtime.KeepAlive(ix)
	}
	b.ReportMetric(perEvent, "bytes/event")
	b.ReportMetric(counted, "counted-bytes/event")
	b.ReportMetric(total/(1<<20), "MiB/30k-events")
}

// BenchmarkAttribute is the cost per change: off (the callback called
// directly, no attribution), index (holding the event alone), the fast path (its event already held: index
// insert, match, callback on the caller's goroutine) and the slow path
// (the change waits: a waiter, the timer, the event's arrival, a
// goroutine running the callback). The index's clock advances 1ms a
// change, so that it holds what 1,000 writes a second leave (30,000
// events, and as many consumed ones remembered for deduplication), as in
// a steady state.
func BenchmarkAttribute(b *testing.B) {
	// The changes were watched before the index's clock starts: their
	// events come after them, as the apiserver's do.
	lines := make([][]byte, 4096)
	for i := range lines {
		lines[i] = benchEvent(b, i, fmt.Sprintf("config-%d", i), "alice", t0.Add(-time.Second))
	}
	recs := make([]Record, len(lines))
	for i, l := range lines {
		recs[i], _, _ = DecodeEvent(l)
	}
	changeOf := func(i int) Change {
		r := &recs[i%len(recs)]
		return Change{Resource: "configmaps", Namespace: "shop", Name: r.Name, UID: "u", ResourceVersion: "1", Type: change.Updated, Time: r.Completed}
	}
	// event is the i-th write: a decoded record with an auditID of its own
	// (a repeated one would be dropped as a redelivery).
	event := func(i int) Record {
		r := recs[i%len(recs)]
		r.AuditID = strconv.Itoa(i)
		return r
	}
	ctx := context.Background()

	b.Run("off", func(b *testing.B) {
		matched := 0
		cb := func(a change.Attribution) { matched++ }
		i := 0
		for b.Loop() {
			c := changeOf(i)
			cb(change.Attribution{Match: change.Match(c.Type)})
			i++
		}
	})
	b.Run("index", func(b *testing.B) { // the fast path's share that is the event's, not the change's
		clk := newFakeClock()
		ix := NewIndex(IndexOptions{Clock: clk})
		i := 0
		for b.Loop() {
			ix.Add(SourceWebhook, []Record{event(i)}, 0)
			clk.Step(time.Millisecond)
			i++
		}
	})
	b.Run("fast", func(b *testing.B) {
		clk := newFakeClock()
		ix := NewIndex(IndexOptions{Clock: clk})
		a := NewAttributor(ix, AttributorOptions{Clock: clk})
		defer a.Close()
		matched := 0
		cb := func(at change.Attribution) {
			if at.Match == change.MatchWindow {
				matched++
			}
		}
		i := 0
		for b.Loop() {
			ix.Add(SourceWebhook, []Record{event(i)}, 0)
			if err := a.Submit(ctx, changeOf(i), cb); err != nil {
				b.Fatal(err)
			}
			clk.Step(time.Millisecond)
			i++
		}
		if matched != i {
			b.Fatalf("%d of %d matched", matched, i)
		}
	})
	b.Run("slow", func(b *testing.B) {
		clk := newFakeClock()
		ix := NewIndex(IndexOptions{Clock: clk})
		a := NewAttributor(ix, AttributorOptions{Clock: clk})
		defer a.Close()
		done := make(chan change.Attribution, 1)
		cb := func(at change.Attribution) { done <- at }
		i := 0
		for b.Loop() {
			if err := a.Submit(ctx, changeOf(i), cb); err != nil {
				b.Fatal(err)
			}
			ix.Add(SourceWebhook, []Record{event(i)}, 0)
			if at := <-done; at.Match != change.MatchWindow {
				b.Fatalf("change %d: %+v", i, at)
			}
			clk.Step(time.Millisecond)
			i++
		}
	})
}

// BenchmarkDecodeEventList decodes lists of 10 and 100 events: the cost
// per event is the same (linear in the input).
func BenchmarkDecodeEventList(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		lines := make([][]byte, n)
		for i := range lines {
			lines[i] = benchEvent(b, i, fmt.Sprintf("config-%d", i), "alice", time.Now())
		}
		body := eventList(lines)
		b.Run(fmt.Sprint("events=", n), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				kept := 0
				if _, err := DecodeEventList(bytes.NewReader(body), func(Record) error { kept++; return nil }); err != nil || kept != n {
					b.Fatalf("kept %d of %d: %v", kept, n, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
		})
	}
}
