package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// soakSettings are TestSoak's knobs, from the environment (make soak sets
// them): how long it runs, how many writes a second, over how many
// objects, how often it samples, and where it writes the samples.
type soakSettings struct {
	duration, every time.Duration
	rate, objects   int
	out             string
}

func soakFromEnv(t *testing.T) soakSettings {
	t.Helper()
	s := soakSettings{duration: 3 * time.Minute, every: 5 * time.Second, rate: 100, objects: 500}
	for _, d := range []struct {
		env string
		to  *time.Duration
	}{{"SOAK_DURATION", &s.duration}, {"SOAK_SAMPLE", &s.every}} {
		if v := os.Getenv(d.env); v != "" {
			x, err := time.ParseDuration(v)
			if err != nil || x <= 0 {
				t.Fatalf("%s=%q: not a positive duration", d.env, v)
			}
			*d.to = x
		}
	}
	for _, d := range []struct {
		env string
		to  *int
	}{{"SOAK_RATE", &s.rate}, {"SOAK_OBJECTS", &s.objects}} {
		if v := os.Getenv(d.env); v != "" {
			x, err := strconv.Atoi(v)
			if err != nil || x <= 0 {
				t.Fatalf("%s=%q: not a positive number", d.env, v)
			}
			*d.to = x
		}
	}
	s.out = os.Getenv("SOAK_OUT")
	return s
}

// soakSeries are what TestSoak samples, with how much each may grow
// from the first third of the samples after the warm-up to the last
// third: a fraction of the first, plus a constant.
var soakSeries = []struct {
	name, metric string
	frac, plus   float64
}{
	{"goroutines", "go_goroutines", 0.10, 20},
	{"fds", "process_open_fds", 0.10, 10},
	{"heap", "go_memstats_heap_inuse_bytes", 0.30, 8 << 20},
	{"rss", "process_resident_memory_bytes", 0.30, 16 << 20},
	{"queued", "fieldwatch_workqueue_depth", 0, 2000},
	{"history", "fieldwatch_history_bytes", 0, 0}, // bounded by --history-max-bytes instead
	{"cpu", "process_cpu_seconds_total", 0, 0},    // a counter: reported per write, not bounded
}

// TestSoak runs fieldwatch with its history at a steady rate of writes
// (SOAK_RATE a second, updates of SOAK_OBJECTS ConfigMaps, every 50th
// write a delete and re-create under the same name, so that the number
// of objects stays put) for SOAK_DURATION (3 minutes; make soak runs an
// hour), sampling its goroutines, file descriptors, heap, RSS, work
// queue and history size every SOAK_SAMPLE. After a warm-up (a fifth of
// the run, 5 minutes at most) none may grow past its bound from the
// first third of the samples to the last (soakSeries), the history stays
// within --history-max-bytes, and every write is delivered (losscheck).
// The samples go to SOAK_OUT/soak.csv, and as a plot to SOAK_OUT/soak.png,
// when SOAK_OUT is set.
func TestSoak(t *testing.T) {
	cfg := soakFromEnv(t)
	env := testenv.Shared(t)
	ns := namespace(t, env, "soak")
	kc := env.WriteKubeconfig(t)
	h := newHooks(t)
	const maxHistory = 16 << 20
	fw := startFieldwatch(t, kc, "--rules", h.rules(t, ns, "a"), "--state-dir", t.TempDir(),
		"--history-max-bytes", strconv.Itoa(maxHistory), "--log-level", "info")

	cms := env.Dynamic(t).Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(ns)
	w := &writers{t: t, ns: ns}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	create := func(i int, name string) {
		o, err := cms.Create(ctx, w.object("ConfigMap", name, i), metav1.CreateOptions{})
		if err == nil {
			w.record(made{"created", "ConfigMap", name, o.GetUID(), o.GetResourceVersion(), time.Now(), nil})
		}
	}
	for i := range cfg.objects {
		create(i, fmt.Sprintf("soak-%05d", i))
	}
	// Writers: workers take ticks at the rate; object i%objects is
	// written by worker i%workers only, so one object's writes are in
	// order.
	const workers = 8
	var wg sync.WaitGroup
	ticks := make([]chan int, workers)
	for k := range ticks {
		ticks[k] = make(chan int, 64)
		wg.Go(func() {
			for i := range ticks[k] {
				name := fmt.Sprintf("soak-%05d", i%cfg.objects)
				now := time.Now()
				if i%50 == 49 {
					uid := w.uidOf("ConfigMap", name)
					if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err == nil {
						w.record(made{"deleted", "ConfigMap", name, uid, "", now, nil})
					}
					create(i, name)
					continue
				}
				patch := fmt.Appendf(nil, `{"data":{"v":"%d"}}`, i)
				if o, err := cms.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err == nil {
					w.record(made{"updated", "ConfigMap", name, o.GetUID(), o.GetResourceVersion(), now, nil})
				}
			}
		})
	}
	start := time.Now()
	wg.Go(func() {
		defer func() {
			for _, c := range ticks {
				close(c)
			}
		}()
		tick := time.NewTicker(time.Second / time.Duration(cfg.rate))
		defer tick.Stop()
		for i := 0; time.Since(start) < cfg.duration; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			select {
			case ticks[(i%cfg.objects)%workers] <- i:
			default: // the apiserver is behind: the rate is what it takes
			}
		}
	})

	type sample struct {
		at     time.Duration
		writes int
		values []float64
	}
	var samples []sample
	sampler := time.NewTicker(cfg.every)
	for time.Since(start) < cfg.duration {
		<-sampler.C
		_, body := fw.get("/metrics")
		s := sample{at: time.Since(start), writes: len(w.made())}
		for _, ser := range soakSeries {
			s.values = append(s.values, sumMetric(body, ser.metric))
		}
		samples = append(samples, s)
	}
	sampler.Stop()
	wg.Wait()
	writes := len(w.made())
	o := settle(t, h, w, 2*time.Minute)
	t.Logf("soak of %s at %d writes/s asked, %.0f made: %s", cfg.duration, cfg.rate, float64(writes)/cfg.duration.Seconds(), o)

	var csv strings.Builder
	csv.WriteString("seconds")
	for _, ser := range soakSeries {
		csv.WriteString("," + ser.name)
	}
	csv.WriteString("\n")
	for _, s := range samples {
		fmt.Fprintf(&csv, "%.0f", s.at.Seconds())
		for _, v := range s.values {
			fmt.Fprintf(&csv, ",%.0f", v)
		}
		csv.WriteString("\n")
	}
	if cfg.out != "" {
		if err := os.MkdirAll(cfg.out, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg.out, "soak.csv"), []byte(csv.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	warm := min(cfg.duration/5, 5*time.Minute)
	if cfg.out != "" {
		names := make([]string, len(soakSeries))
		for i, ser := range soakSeries {
			names[i] = ser.name
		}
		at := make([]time.Duration, len(samples))
		values := make([][]float64, len(samples))
		for k, s := range samples {
			at[k], values[k] = s.at, s.values
		}
		if err := soakPlot(filepath.Join(cfg.out, "soak.png"), names, at, values, warm); err != nil {
			t.Error(err)
		}
	}
	var steady []sample
	for _, s := range samples {
		if s.at >= warm {
			steady = append(steady, s)
		}
	}
	if len(steady) < 6 {
		t.Fatalf("%d samples after the warm-up of %s: too few to tell a trend (SOAK_DURATION or SOAK_SAMPLE)", len(steady), warm)
	}
	third := len(steady) / 3
	for i, ser := range soakSeries {
		var xs, ys []float64
		for _, s := range steady {
			xs, ys = append(xs, s.at.Hours()), append(ys, s.values[i])
		}
		first, last := mean(ys[:third]), mean(ys[len(ys)-third:])
		t.Logf("%-10s first third %14.0f, last third %14.0f, slope %14.0f an hour", ser.name, first, last, slope(xs, ys))
		switch ser.name {
		case "cpu":
			a, b := steady[0], steady[len(steady)-1]
			t.Logf("CPU per write after the warm-up: %.0f µs (%.1f s for %d writes)",
				(b.values[i]-a.values[i])/float64(max(b.writes-a.writes, 1))*1e6, b.values[i]-a.values[i], b.writes-a.writes)
			continue
		case "history":
			if peak := slices.Max(ys); peak > maxHistory*1.1 {
				t.Errorf("history: %.0f bytes, past --history-max-bytes %d", peak, maxHistory)
			}
			continue
		}
		if bound := first*(1+ser.frac) + ser.plus; last > bound {
			t.Errorf("%s grew from %.0f to %.0f, past its bound %.0f", ser.name, first, last, bound)
		}
	}
	t.Logf("samples:\n%s", csv.String())
}

// sumMetric sums the samples of metric name (every label set) in a
// Prometheus text exposition.
func sumMetric(body, name string) float64 {
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest == "" || (rest[0] != ' ' && rest[0] != '{')) {
			continue
		}
		fields := strings.Fields(line)
		if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}

// slope is the least-squares slope of ys over xs.
func slope(xs, ys []float64) float64 {
	mx, my := mean(xs), mean(ys)
	var num, den float64
	for i := range xs {
		num += (xs[i] - mx) * (ys[i] - my)
		den += (xs[i] - mx) * (xs[i] - mx)
	}
	if den == 0 {
		return math.NaN()
	}
	return num / den
}
