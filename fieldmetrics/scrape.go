package fieldmetrics

import (
	"context"
	"encoding/binary"
	"iter"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/fieldwatch/fieldwatch/change"
)

// Object is an object a Source holds: Map decodes it into a new map the
// caller owns (the watcher's cached objects are such). A Scraper keys its
// memo by the Object itself, so an Object must be comparable and never
// change: a changed object is a new Object.
type Object interface {
	Map() map[string]any
}

// Snapshot is what a Source holds of one resource.
type Snapshot struct {
	Resource change.Resource
	Objects  iter.Seq[Object]
}

// Source gives the objects series are computed from: the watcher's
// cache, in fieldwatch.
type Source interface {
	// Snapshots returns the objects of each resource want accepts that
	// the source holds all of (synced): none when the cluster serves no
	// such resource. A scrape calls it once.
	Snapshots(want func(change.Resource) bool) []Snapshot
}

// Options bound what a Scraper keeps and exposes.
type Options struct {
	// SeriesLimit bounds the series of one metric family (default
	// DefaultSeriesLimit): the series past it are skipped and counted.
	SeriesLimit int
	// MaxLabelValueBytes bounds a label value (default
	// DefaultMaxLabelValueBytes): a series with a longer one is skipped
	// and counted.
	MaxLabelValueBytes int
	// Logger receives evaluation errors, one a second at most (default
	// slog.Default()).
	Logger *slog.Logger
	// Metrics counts what the scrapes skip (nil: not counted).
	Metrics *Metrics
	// onError, if set, receives every evaluation error (Set.Series).
	onError func(error)
	// fresh evaluates every object at every scrape instead of keeping
	// the series of objects that did not change (BenchmarkScrape compares
	// both).
	fresh bool
}

// The defaults of Options.
const (
	DefaultSeriesLimit        = 1_000_000
	DefaultMaxLabelValueBytes = 4096
)

// Skip reasons, the reason label of the skipped series counter.
const (
	SkipLimit      = "limit"
	SkipLabelValue = "label_value_too_long"
)

// Scraper computes the series of a Set from a Source. It keeps, for each
// object, the series it gave, encoded (a memo keyed by the immutable
// Object): a scrape evaluates only the objects that changed since the
// previous one, and forgets those that are gone, so that the series of a
// deleted object or of a deleted CRD's resource go with them. One scrape
// runs at a time; others wait.
type Scraper struct {
	opts   Options
	errLog rate.Sometimes

	mu   sync.Mutex
	set  *Set
	memo map[memoKey]*resMemo
	gen  uint32
	// Scratch buffers of evaluate and emit.
	out  evalOut
	buf  []byte
	sec  []byte
	keep []evalSeries
	base []outLabel
	labs []outLabel
	// count is the series kept per family (by Family.index).
	count []int
}

type memoKey struct {
	r   int // index in Set.resources
	res change.Resource
}

// resMemo is the memo of one resource as one configured resource reads
// it.
type resMemo struct {
	r   int // index in Set.resources
	rm  *resourceMetrics
	res change.Resource
	// key orders the resources in a scrape: res.String().
	key  string
	seen uint32
	// entries are the objects' series, dense so that a scrape reads them
	// in order (scattered entries cost it a cache miss each,
	// BenchmarkScrape); index finds an object's.
	entries []entry
	index   map[Object]int32
	// common are the default labels of each family of rm on res.
	common [][]outLabel
}

// entry is the encoded series of one object.
type entry struct {
	obj  Object
	data []byte
	// has has bit i set when family section i holds series (the
	// sections past 64 are read to tell).
	has  uint64
	seen uint32
	// truncated says a family's series were cut at its limit: the object
	// is evaluated again at the next scrape.
	truncated bool
}

// hasSeries reports whether section i of en holds series.
func (en *entry) hasSeries(i int) bool {
	if i < 64 {
		return en.has&(1<<i) != 0
	}
	return true
}

// put keeps en, an object's new series, replacing its previous ones.
func (m *resMemo) put(en entry) {
	if i, ok := m.index[en.obj]; ok {
		m.entries[i] = en
		return
	}
	m.index[en.obj] = int32(len(m.entries))
	m.entries = append(m.entries, en)
}

// remove forgets entry i, moving the last one into its place.
func (m *resMemo) remove(i int) {
	delete(m.index, m.entries[i].obj)
	last := len(m.entries) - 1
	if i != last {
		m.entries[i] = m.entries[last]
		m.index[m.entries[i].obj] = int32(i)
	}
	m.entries[last] = entry{}
	m.entries = m.entries[:last]
}

// NewScraper returns a Scraper of set.
func NewScraper(set *Set, opts Options) *Scraper {
	if opts.SeriesLimit <= 0 {
		opts.SeriesLimit = DefaultSeriesLimit
	}
	if opts.MaxLabelValueBytes <= 0 {
		opts.MaxLabelValueBytes = DefaultMaxLabelValueBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Scraper{opts: opts, errLog: rate.Sometimes{Interval: time.Second}}
	s.reset(set)
	return s
}

// SetSet replaces the set (a reloaded configuration): the memo starts
// over.
func (s *Scraper) SetSet(set *Set) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reset(set)
}

// Set returns the set the scraper computes.
func (s *Scraper) Set() *Set {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.set
}

func (s *Scraper) reset(set *Set) {
	if set == nil {
		set = &Set{nameIdx: map[string]int{}}
	}
	s.set = set
	s.memo = map[memoKey]*resMemo{}
	s.count = make([]int, len(set.families))
	if s.opts.Metrics != nil {
		s.opts.Metrics.reset(set)
	}
}

// emitter receives the series of a scrape, family by family: begin once
// per family that has series, then each series with its labels sorted by
// name (labels is reused after the call returns).
type emitter interface {
	begin(f *Family) error
	series(f *Family, labels []outLabel, value float64) error
}

// scrape updates the memo from src and hands every series to e, family
// by family in name order. It stops at e's first error, or when ctx ends.
func (s *Scraper) scrape(ctx context.Context, src Source, e emitter) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	s.update(src)
	err := s.emit(ctx, e)
	if m := s.opts.Metrics; m != nil {
		m.scrapeSeconds.Observe(time.Since(start).Seconds())
	}
	return err
}

// update evaluates the objects that are new or changed since the last
// scrape and forgets those that are gone.
func (s *Scraper) update(src Source) {
	s.gen++
	if s.opts.fresh {
		s.memo = map[memoKey]*resMemo{}
		clear(s.count)
	}
	snaps := src.Snapshots(s.set.Selects)
	byGroup := make(map[string][]int, len(s.set.byGroup)) // indexes in snaps
	for i := range snaps {
		byGroup[snaps[i].Resource.Group] = append(byGroup[snaps[i].Resource.Group], i)
	}
	unmatched := 0
	for i, rm := range s.set.resources {
		matched := false
		for _, si := range byGroup[rm.sel.Group] {
			snap := &snaps[si]
			if !rm.sel.Matches(snap.Resource) {
				continue
			}
			matched = true
			k := memoKey{r: i, res: snap.Resource}
			m := s.memo[k]
			if m == nil {
				m = &resMemo{r: i, rm: rm, res: snap.Resource, key: snap.Resource.String(), index: map[Object]int32{}, common: commonLabels(rm, snap.Resource)}
				s.memo[k] = m
			}
			m.seen = s.gen
			for o := range snap.Objects {
				i, ok := m.index[o]
				if ok && !m.entries[i].truncated {
					m.entries[i].seen = s.gen
					continue
				}
				if ok {
					s.forget(rm, &m.entries[i])
				}
				en := s.evaluate(m, o)
				en.seen = s.gen
				m.put(en)
			}
			for i := len(m.entries) - 1; i >= 0; i-- {
				if m.entries[i].seen != s.gen {
					s.forget(rm, &m.entries[i])
					m.remove(i)
				}
			}
		}
		if !matched {
			unmatched++
		}
	}
	objects := 0
	for k, m := range s.memo {
		if m.seen != s.gen {
			for i := range m.entries {
				s.forget(m.rm, &m.entries[i])
			}
			delete(s.memo, k)
			continue
		}
		objects += len(m.entries)
	}
	if m := s.opts.Metrics; m != nil {
		m.objects.Set(float64(objects))
		m.unmatched.Set(float64(unmatched))
	}
}

// forget takes en's series out of the families' counts.
func (s *Scraper) forget(rm *resourceMetrics, en *entry) {
	r := reader{b: en.data}
	for _, f := range rm.families {
		n := r.uvarint()
		sec := reader{b: r.b[r.off:min(r.off+n, len(r.b))]}
		for range sec.uvarint() {
			sec.label(s.set)
		}
		s.count[f.index] -= sec.uvarint()
		r.off = min(r.off+n, len(r.b))
	}
}

// evaluate computes the series of o for every family of m's resource
// and encodes them, each series' labels in their final order (see
// encode.go): a scrape only decodes them.
func (s *Scraper) evaluate(m *resMemo, o Object) entry {
	rm := m.rm
	obj := o.Map()
	en := entry{obj: o}
	b := s.buf[:0]
	out := &s.out
	for fi, f := range rm.families {
		out.reset()
		// The base labels are read first, into the slots before the
		// series' own.
		out.begin()
		out.addPathLabels(s.set, obj, &f.base)
		nBase := len(out.labels)
		f.each.values(f.each.eachPath().Get(obj), out)
		s.logErrors(f, obj, out.errs)
		s.sortByName(out.labels[:nBase])
		for _, sr := range out.series {
			s.sortByName(out.labels[sr.start:sr.end])
		}

		sec := s.sec[:0]
		baseOK := s.fits(out.labels[:nBase])
		if !baseOK {
			nBase = 0
		}
		base := out.labels[:nBase]
		sec = binary.AppendUvarint(sec, uint64(nBase))
		for i := range base {
			sec = appendLabel(sec, s.set, &base[i])
		}
		keep := s.keep[:0]
		for _, sr := range out.series {
			switch {
			case !baseOK || !s.fits(out.labels[sr.start:sr.end]):
				s.skipped(f, SkipLabelValue, 1)
			case s.count[f.index] >= s.opts.SeriesLimit:
				s.skipped(f, SkipLimit, 1)
				en.truncated = true
			default:
				s.count[f.index]++
				keep = append(keep, sr)
			}
		}
		sec = binary.AppendUvarint(sec, uint64(len(keep)))
		for _, sr := range keep {
			sec = s.appendSeries(sec, out.labels[sr.start:sr.end], base, m.common[fi])
			sec = binary.LittleEndian.AppendUint64(sec, math.Float64bits(sr.value))
		}
		if len(keep) > 0 && fi < 64 {
			en.has |= 1 << fi
		}
		b = binary.AppendUvarint(b, uint64(len(sec)))
		b = append(b, sec...)
		s.sec, s.keep = sec, keep
	}
	en.data = slices.Clone(b)
	s.buf = b
	return en
}

// appendSeries appends the labels of one series in their final order:
// its own (sorted), then those of base and defaults (each sorted) whose
// names it does not have, by name, base winning over defaults, as
// kube-state-metrics gives each series its default labels.
func (s *Scraper) appendSeries(b []byte, own, base []label, defaults []outLabel) []byte {
	i, j, k := 0, 0, 0
	n := 0
	start := len(b)
	b = append(b, 0) // the count, set below (under 128: one byte)
	for i < len(own) || j < len(base) || k < len(defaults) {
		name, from := "", -1
		if i < len(own) {
			name, from = s.set.labelName(&own[i]), 0
		}
		if j < len(base) {
			if bn := s.set.labelName(&base[j]); from < 0 || bn < name {
				name, from = bn, 1
			}
		}
		if k < len(defaults) && (from < 0 || defaults[k].Name < name) {
			name, from = defaults[k].Name, 2
		}
		switch from {
		case 0:
			b = appendLabel(b, s.set, &own[i])
		case 1:
			b = binary.AppendUvarint(b, uint64(j)<<2|refBase)
		default:
			b = binary.AppendUvarint(b, uint64(k)<<2|refDefault)
		}
		n++
		if i < len(own) && s.set.labelName(&own[i]) == name {
			i++
		}
		if j < len(base) && s.set.labelName(&base[j]) == name {
			j++
		}
		if k < len(defaults) && defaults[k].Name == name {
			k++
		}
	}
	if n >= 0x80 {
		// More labels than one byte counts: shift the labels right.
		var cnt [binary.MaxVarintLen64]byte
		c := binary.PutUvarint(cnt[:], uint64(n))
		b = append(b, cnt[:c-1]...)
		copy(b[start+c:], b[start+1:len(b)-(c-1)])
		copy(b[start:], cnt[:c])
		return b
	}
	b[start] = byte(n)
	return b
}

// sortByName sorts labels by name.
func (s *Scraper) sortByName(labels []label) {
	if len(labels) < 2 {
		return
	}
	slices.SortFunc(labels, func(a, b label) int { return strings.Compare(s.set.labelName(&a), s.set.labelName(&b)) })
}

// fits reports whether every label name read from the object and every
// value is within the bound.
func (s *Scraper) fits(labels []label) bool {
	for i := range labels {
		if len(labels[i].value) > s.opts.MaxLabelValueBytes || len(labels[i].literal) > s.opts.MaxLabelValueBytes {
			return false
		}
	}
	return true
}

func (s *Scraper) skipped(f *family, reason string, n int) {
	if m := s.opts.Metrics; m != nil {
		m.skipped(f.Family, reason, n)
	}
	s.errLog.Do(func() {
		s.opts.Logger.Warn("metric series skipped", "metric", f.Name, "reason", reason)
	})
}

// logErrors counts a family's evaluation errors on obj and logs one a
// second: at warning level, or debug with errorLogV above 0.
func (s *Scraper) logErrors(f *family, obj map[string]any, errs []error) {
	if len(errs) == 0 {
		return
	}
	if s.opts.onError != nil {
		for _, err := range errs {
			s.opts.onError(err)
		}
	}
	if m := s.opts.Metrics; m != nil {
		m.errors.WithLabelValues(f.Name).Add(float64(len(errs)))
	}
	level := slog.LevelWarn
	if f.logV > 0 {
		level = slog.LevelDebug
	}
	s.errLog.Do(func() {
		meta, _ := obj["metadata"].(map[string]any)
		ns, _ := meta["namespace"].(string)
		name, _ := meta["name"].(string)
		s.opts.Logger.Log(context.Background(), level, "metric evaluation failed", "metric", f.Name,
			"namespace", ns, "name", name, "error", errs[0], "errors", len(errs))
	})
}

// commonLabels returns the default labels of each family of rm on res:
// the resource's commonLabels, overridden by the group, version and kind
// labels, overridden by the metric's commonLabels.
func commonLabels(rm *resourceMetrics, res change.Resource) [][]outLabel {
	out := make([][]outLabel, len(rm.families))
	for i, f := range rm.families {
		m := maps.Clone(rm.common)
		if m == nil {
			m = map[string]string{}
		}
		m[labelGroup] = res.Group
		m[labelVersion] = res.Version
		m[labelKind] = res.Kind
		maps.Copy(m, f.common)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			out[i] = append(out[i], outLabel{Name: k, Value: m[k]})
		}
	}
	return out
}

// emit hands the memo's series to e, family by family.
func (s *Scraper) emit(ctx context.Context, e emitter) error {
	memos := make([]*resMemo, 0, len(s.memo))
	for _, m := range s.memo {
		memos = append(memos, m)
	}
	slices.SortFunc(memos, func(a, b *resMemo) int {
		if a.r != b.r {
			return a.r - b.r
		}
		return strings.Compare(a.key, b.key)
	})
	labels := s.labs[:0]
	defer func() { s.labs = labels[:0] }()
	for _, fam := range s.set.families {
		begun := false
		exposed := 0
		for _, m := range memos {
			pos := slices.IndexFunc(m.rm.families, func(f *family) bool { return f.Family == fam })
			if pos < 0 {
				continue
			}
			defaults := m.common[pos]
			for i := range m.entries {
				en := &m.entries[i]
				if !en.hasSeries(pos) {
					continue
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				r := reader{b: en.data}
				r.skipSections(pos)
				r.uvarint() // the section's length
				nBase := r.uvarint()
				base := s.base[:0]
				for range nBase {
					base = append(base, r.label(s.set))
				}
				s.base = base
				for range r.uvarint() {
					labels = labels[:0]
					for range r.uvarint() {
						labels = append(labels, r.ref(s.set, base, defaults))
					}
					v := r.float()
					if r.bad {
						break
					}
					if !begun {
						if err := e.begin(fam); err != nil {
							return err
						}
						begun = true
					}
					if err := e.series(fam, labels, v); err != nil {
						return err
					}
					exposed++
				}
			}
		}
		if m := s.opts.Metrics; m != nil {
			m.series.WithLabelValues(fam.Name).Set(float64(exposed))
		}
	}
	return nil
}
