package crdguard

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/watcher"
)

// Cache is what the guard and the ledger read of fieldwatch's watcher:
// the objects it caches of a resource (*watcher.Watcher implements it).
type Cache interface {
	Cached(gr schema.GroupResource) (watcher.Snapshot, error)
}

// Unknown is the version label of the objects whose stored version the
// ledger does not know.
const Unknown = "unknown"

var storedObjectsDesc = prometheus.NewDesc("fieldwatch_crd_stored_objects",
	"Custom resources per CRD and the version they are stored at in etcd, as the storage-version ledger tells it from their last write "+
		"(version \"unknown\": last written before fieldwatch could tell); for the resources fieldwatch caches, each version of "+
		"status.storedVersions present even at 0.",
	[]string{"crd", "version"}, nil)

// Collector returns the ledger's metric, fieldwatch_crd_stored_objects,
// computed at each scrape from the objects cache() holds: the resources
// fieldwatch does not watch in every namespace have no series. cache may
// return nil (no watcher yet).
func (l *Ledger) Collector(cache func() Cache) prometheus.Collector {
	return &ledgerCollector{l: l, cache: cache}
}

type ledgerCollector struct {
	l     *Ledger
	cache func() Cache
}

func (c *ledgerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- storedObjectsDesc }

func (c *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	cache := c.cache()
	if cache == nil {
		return
	}
	type crd struct {
		name string
		gr   schema.GroupResource
		cl   *Classifier
	}
	c.l.mu.Lock()
	crds := make([]crd, 0, len(c.l.crds))
	for name, st := range c.l.crds {
		crds = append(crds, crd{name: name, gr: st.gr, cl: st.classifier()})
	}
	c.l.mu.Unlock()
	sort.Slice(crds, func(i, j int) bool { return crds[i].name < crds[j].name })
	for _, d := range crds {
		snap, err := cache.Cached(d.gr)
		if err != nil {
			continue
		}
		counts := map[string]int{}
		for _, v := range d.cl.MayBe() {
			counts[v] = 0
		}
		for _, o := range snap.Objects {
			v := d.cl.Version(o.GetResourceVersion())
			if v == "" {
				v = Unknown
			}
			counts[v]++
		}
		for v, n := range counts {
			ch <- prometheus.MustNewConstMetric(storedObjectsDesc, prometheus.GaugeValue, float64(n), d.name, v)
		}
	}
}
