package action

import (
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fieldwatch/fieldwatch/rules"
)

// BenchmarkNotify: firings per second and CPU per firing (the whole
// process's, receiver included) through the webhook action, the
// alertmanager action (batches of up to maxAlertsPerPost alerts) and the
// slack action grouping (a 10ms window, messages unpaced), each to a
// local receiver, side by side in one run.
func BenchmarkNotify(b *testing.B) {
	for _, bc := range []struct {
		name   string
		action func(url string) rules.Action
	}{
		{"webhook", func(url string) rules.Action { return rules.Action{Webhook: &rules.WebhookAction{URL: url}} }},
		{"alertmanager", func(url string) rules.Action {
			return rules.Action{Alertmanager: &rules.AlertmanagerAction{URLs: []string{url}}}
		}},
		{"slack-grouped", func(url string) rules.Action {
			return rules.Action{Slack: &rules.SlackAction{WebhookURL: secretFile(b, url), Notify: rules.Notify{
				Group: &rules.Group{Window: 10 * time.Millisecond}, RateLimit: &rules.RateLimit{Every: time.Nanosecond}}}}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			url := benchReceiver(b, nil)
			d := benchDispatcher(b)
			r := &rules.Rule{Name: "bench-" + bc.name, Actions: []rules.Action{bc.action(url)}}
			drain(b, d, r, 2000) // warm the connections
			b.ResetTimer()
			cpu := cpuTime(b)
			rate := drain(b, d, r, b.N)
			used := cpuTime(b) - cpu
			b.ReportMetric(rate, "firings/s")
			b.ReportMetric(float64(used.Microseconds())/float64(b.N), "cpu-µs/firing")
		})
	}
}

// BenchmarkGroupWaiting: the heap that 10,000 firings waiting in one slack
// action's groups hold: their payloads (about 400 bytes, as newFiring
// makes them) and the firings, items and groups around them.
func BenchmarkGroupWaiting(b *testing.B) {
	const n = DefaultGroupMaxWaiting
	for range b.N {
		b.StopTimer()
		clk := clocktesting.NewFakeClock(time.Now())
		// One more than n may wait: at the bound the group would go.
		h := newHarness(b, func(o *Options) { o.Clock = clk; o.GroupMaxWaiting = n + 1 })
		r := notifyRule("waiting", rules.Action{Slack: &rules.SlackAction{WebhookURL: secretFile(b, "http://127.0.0.1:1/x"),
			Notify: rules.Notify{Group: &rules.Group{By: []string{rules.GroupByNamespace}}}}})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		firings := make([]rules.Firing, n)
		for i := range firings {
			firings[i] = newFiring(r)
		}
		b.StartTimer()
		for _, f := range firings {
			h.deliver(b, f, nil)
		}
		grouped := h.metrics.grouped.WithLabelValues("waiting", "slack", "0")
		for testutil.ToFloat64(grouped) != n {
			runtime.Gosched()
		}
		b.StopTimer()
		clear(firings) // only the groups hold them now
		runtime.GC()
		runtime.ReadMemStats(&after)
		held := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		b.ReportMetric(held/n, "heap-B/firing")
		b.ReportMetric(held/(1<<20), "heap-MiB/10k")
		h.Abort() // hand the waiting firings over: nothing to send
		b.StartTimer()
	}
}
