package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/internal/testenv/browser"
)

// TestHistoryClusters: two fieldwatch instances, each watching a control
// plane of its own with --cluster-name (east, west), write their
// histories into one PostgreSQL database, each in a chain of its own.
// Either's API answers for both clusters, and cluster= selects one's
// entries; its page (headless Chromium) has a cluster filter and column,
// and the filter narrows the timeline to that cluster; the trail holds
// both chains and verifies.
func TestHistoryClusters(t *testing.T) {
	testenv.SkipShort(t, testenv.NeedsPostgres)
	pg := testenv.StartPostgres(t)
	if err := pg.CreateDatabase(context.Background(), "clusters"); err != nil {
		t.Fatal(err)
	}
	dsn := pg.DSN("clusters")
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := writeTestFile(rulesFile, allChanges); err != nil {
		t.Fatal(err)
	}
	made := map[string]int{"east": 3, "west": 2}
	servers := map[string]historyClient{}
	for _, cluster := range []string{"east", "west"} {
		env := testenv.Start(t, testenv.Options{})
		env.EnsureNamespace(t, "shop")
		addr := make(chan string, 1)
		a, err := newApp(t.Context(), Config{
			RulesFiles: []string{rulesFile}, Rest: env.Config(), HTTPAddr: "127.0.0.1:0", ClusterName: cluster,
			Stdout: &testenv.SyncBuffer{}, Logger: slog.New(slog.DiscardHandler), GracePeriod: 10 * time.Second,
			History: HistoryConfig{DSN: dsn, InsecureLoopback: true},
			Ready:   func(a string) { addr <- a },
		})
		if err != nil {
			t.Fatal(err)
		}
		testenv.RunUntilCleanup(t, 30*time.Second, a.run)
		servers[cluster] = historyClient{base: "http://" + <-addr}
		testenv.Eventually(t, time.Minute, cluster+"'s fieldwatch to be ready", func() bool { ok, _ := a.ready(); return ok })
		cms := env.Dynamic(t).Resource(cmGVR).Namespace("shop")
		for i := range made[cluster] {
			if _, err := cms.Create(context.Background(), testConfigMap(fmt.Sprintf("%s-%d", cluster, i), map[string]any{"k": "v"}), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	east := servers["east"]
	testenv.Eventually(t, time.Minute, "both clusters' entries in the shared history", func() bool {
		got, _ := east.query(t, url.Values{"namespace": {"shop"}})
		return len(got) == made["east"]+made["west"]
	})
	for _, server := range []string{"east", "west"} {
		for cluster, n := range made {
			got, _ := servers[server].query(t, url.Values{"namespace": {"shop"}, "cluster": {cluster}})
			if len(got) != n {
				t.Errorf("%s's API, cluster=%s: %d entries, want %d", server, cluster, len(got), n)
			}
			for _, e := range got {
				if e.cluster != cluster || !strings.HasPrefix(e.name, cluster+"-") {
					t.Errorf("%s's API, cluster=%s: entry %s of cluster %q", server, cluster, e.name, e.cluster)
				}
			}
		}
	}
	if code, body := east.get(t, "/api/v1/history?cluster="); code != 400 || !strings.Contains(string(body), "cluster") {
		t.Errorf("an empty cluster=: %d %s, want 400 naming the parameter", code, body)
	}

	// The page: a cluster column and filter, since the store holds two.
	ctx := browser.Start(t)
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	cells := func() []string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("tr.entry td.cluster")].map(td => td.textContent.trim())`))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	run("open the timeline", chromedp.Navigate(east.base+"/history?namespace=shop"), chromedp.WaitVisible(chromedp.CSS("table.timeline")))
	got := cells()
	slices.Sort(got)
	if want := []string{"east", "east", "east", "west", "west"}; !slices.Equal(got, want) {
		t.Errorf("the timeline's cluster column: %q, want %q", got, want)
	}
	run("filter by cluster west", chromedp.SetValue(chromedp.CSS(`select[name=cluster]`), "west"), chromedp.Submit(chromedp.CSS(`form.filters`)))
	if !testenv.Poll(30*time.Second, func() bool { return slices.Equal(cells(), []string{"west", "west"}) }) {
		t.Errorf("the timeline filtered by cluster west: %q, want its two entries", cells())
	}

	// One chain per instance, named by its cluster, both intact.
	store, err := history.OpenPostgres(context.Background(), dsn, history.PostgresOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	r, err := history.Verify(func(each func(*history.Link, *history.Entry) error) error {
		return store.Links(context.Background(), each)
	}, history.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var chains []string
	for _, c := range r.Chains {
		chains = append(chains, c.Chain)
	}
	if len(r.Problems) > 0 || len(chains) != 2 || !strings.HasPrefix(chains[0], "east/") || !strings.HasPrefix(chains[1], "west/") {
		t.Errorf("the trail: chains %q, problems %v; want east/… and west/…, intact", chains, r.Problems)
	}
}
