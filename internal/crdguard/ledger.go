package crdguard

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// DefaultSettle is LedgerOptions.Settle's default.
const DefaultSettle = 5 * time.Second

// maxEpochs bounds the storage switches kept per CRD: older ones are
// forgotten, and the objects last written before the oldest kept are
// unknown.
const maxEpochs = 32

// CRDResource is the resource of CustomResourceDefinitions.
var CRDResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// LedgerOptions configure a Ledger.
type LedgerOptions struct {
	// Dynamic lists and watches CustomResourceDefinitions, and reads the
	// cluster's revision once a storage switch has settled. Required.
	Dynamic dynamic.Interface
	// Settle is how long after a storage switch the apiserver may still
	// write objects at the version before (each apiserver takes the
	// switch up from its own watch of the CRD): the objects written
	// meanwhile are unknown (default DefaultSettle).
	Settle time.Duration
	// Clock times the settling (default the real clock).
	Clock clock.WithDelayedExecution
	// Logger receives the ledger's logs (default slog.Default()).
	Logger *slog.Logger
}

// Ledger is fieldwatch's storage-version ledger: for each CRD, which
// version its objects are stored at in etcd, told from each object's
// resourceVersion (Classifier).
//
// An object's resourceVersion is the etcd revision of its last write, and
// revisions order every write of the cluster. The ledger follows the CRDs
// with a watch of its own and keeps, for each, the revisions at which its
// storage version switched: an object last written after a switch is
// stored at the version switched to, one written before at the version
// before. The apiserver takes a switch up a moment after storing it, so
// the objects written within Settle of a switch are unknown: the ledger
// reads the cluster's revision once Settle has passed and places the
// writes after it only. Objects last written before the ledger first saw
// their CRD are unknown (their CRD's history is not known), unless
// status.storedVersions lists a single version or a migration record
// (MigrationAnnotation) covers them. A CRD created while the ledger
// watches has every object at its storage version until a switch.
//
// The ledger holds a few numbers per CRD, never objects: whoever holds
// the objects (the watcher's cache, a paged list) classifies them. It is
// safe for concurrent use.
type Ledger struct {
	dyn     dynamic.Interface
	settle  time.Duration
	clock   clock.WithDelayedExecution
	log     *slog.Logger
	settles chan settleRequest
	synced  atomic.Bool

	mu   sync.Mutex
	crds map[string]*crdState // by CRD name
}

// crdState is what the ledger knows of one CRD.
type crdState struct {
	uid     types.UID
	gr      schema.GroupResource
	rv      uint64 // the last revision of the CRD seen
	storage string
	stored  []string
	// migration is the CRD's MigrationAnnotation as it is.
	migration string
	epochs    []epoch
	// gen counts the storage switches: a settling that a later switch
	// overtook is dropped.
	gen int
}

// settleRequest asks Run to settle the latest switch of a CRD.
type settleRequest struct {
	name string
	uid  types.UID
	gen  int
}

// NewLedger returns a Ledger; Run fills it.
func NewLedger(opts LedgerOptions) *Ledger {
	if opts.Settle <= 0 {
		opts.Settle = DefaultSettle
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Ledger{dyn: opts.Dynamic, settle: opts.Settle, clock: opts.Clock, log: opts.Logger,
		settles: make(chan settleRequest, 64), crds: map[string]*crdState{}}
}

// Run follows the CRDs until ctx ends. It returns nil then.
func (l *Ledger) Run(ctx context.Context) error {
	res := l.dyn.Resource(CRDResource)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return res.Watch(ctx, o)
		},
	}
	r := cache.NewReflectorWithOptions(lw, &unstructured.Unstructured{}, ledgerStore{l}, cache.ReflectorOptions{Name: "fieldwatch-crd-ledger"})
	var wg sync.WaitGroup
	wg.Go(func() { r.RunWithContext(ctx) })
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case req := <-l.settles:
			l.settleNow(ctx, req)
		}
	}
}

// HasSynced reports whether the ledger has read every CRD once.
func (l *Ledger) HasSynced() bool { return l.synced.Load() }

// Classifier returns how the objects of crd, the CRD as the caller knows
// it now, are stored: the ledger's storage switches of it, with crd's
// status.storedVersions and migration record. When the ledger has not
// seen crd's latest write yet, the objects written after what it has
// seen are unknown; when it does not know crd at all, it answers as one
// that has just seen it (NewClassifier).
func (l *Ledger) Classifier(crd *apiextensionsv1.CustomResourceDefinition) *Classifier {
	l.mu.Lock()
	st := l.crds[crd.Name]
	if st == nil || (crd.UID != "" && st.uid != crd.UID) {
		l.mu.Unlock()
		return NewClassifier(crd, l.clock.Now(), l.settle)
	}
	c := &Classifier{epochs: slices.Clone(st.epochs), stored: slices.Clone(crd.Status.StoredVersions)}
	seen := st.rv
	l.mu.Unlock()
	c.setMigration(crd)
	if rv, err := strconv.ParseUint(crd.ResourceVersion, 10, 64); err == nil && rv > seen {
		c.horizon = seen
	}
	return c
}

// classifier returns the ledger's classifier of st as it is now; l.mu
// must be held.
func (st *crdState) classifier() *Classifier {
	c := &Classifier{epochs: slices.Clone(st.epochs), stored: slices.Clone(st.stored)}
	if st.migration != "" {
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{MigrationAnnotation: st.migration}}}
		c.setMigration(crd)
	}
	return c
}

// how a CRD came to the ledger's notice.
type how int

const (
	// listed: found in the first list.
	listed how = iota
	// relisted: found in a later list (a watch could not resume): what
	// happened since the ledger last saw it is not known.
	relisted
	// created: a watch event of a CRD the ledger did not know.
	created
	// modified: a watch event of a CRD it knew.
	modified
)

// crdFacts is what the ledger reads of a CRD.
type crdFacts struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Group string `json:"group"`
		Names struct {
			Plural string `json:"plural"`
		} `json:"names"`
		Versions []struct {
			Name    string `json:"name"`
			Storage bool   `json:"storage"`
		} `json:"versions"`
	} `json:"spec"`
	Status struct {
		StoredVersions []string `json:"storedVersions"`
	} `json:"status"`
}

func factsOf(obj any) (*crdFacts, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected %T in the CRD watch", obj)
	}
	f := &crdFacts{}
	// The converter walks the struct's fields only: a CRD's schemas are
	// not converted.
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, f); err != nil {
		return nil, fmt.Errorf("CustomResourceDefinition %s: %w", u.GetName(), err)
	}
	return f, nil
}

func (f *crdFacts) storage() string {
	for _, v := range f.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

// observe records one sight of a CRD.
func (l *Ledger) observe(obj any, h how) {
	f, err := factsOf(obj)
	if err != nil {
		l.log.Warn("the storage-version ledger cannot read a CRD", "error", err)
		return
	}
	rv, err := strconv.ParseUint(f.ResourceVersion, 10, 64)
	if err != nil {
		l.log.Warn("the storage-version ledger cannot read a CRD's resourceVersion", "name", f.Name, "resourceVersion", f.ResourceVersion)
		return
	}
	storage := f.storage()
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.crds[f.Name]
	switch {
	case st == nil || st.uid != f.UID:
		st = &crdState{uid: f.UID}
		l.crds[f.Name] = st
		switch {
		case h == created:
			// Its objects can only have been written since, at its
			// storage version.
			st.epochs = []epoch{{version: storage}}
		case l.settledSince(lastWrite(f.ManagedFields)):
			st.epochs = []epoch{{version: storage, from: rv}}
		default:
			st.epochs = []epoch{{from: rv}}
			l.settleLater(f.Name, st)
		}
	case storage != st.storage:
		from := rv // the switch's own write
		if h != modified {
			from = st.rv // somewhere since the ledger last saw it
		}
		st.push(epoch{from: from})
		l.settleLater(f.Name, st)
		l.log.Info("storage version switched", "name", f.Name, "from", st.storage, "to", storage, "resourceVersion", rv)
	}
	st.gr = schema.GroupResource{Group: f.Spec.Group, Resource: f.Spec.Names.Plural}
	st.rv, st.storage = rv, storage
	st.stored = f.Status.StoredVersions
	st.migration = f.Annotations[MigrationAnnotation]
}

// settledSince reports whether a write at t is at least Settle old.
func (l *Ledger) settledSince(t time.Time) bool {
	return !t.IsZero() && l.clock.Since(t) >= l.settle
}

// push appends an epoch, forgetting the oldest beyond maxEpochs.
func (st *crdState) push(e epoch) {
	st.epochs = append(st.epochs, e)
	if n := len(st.epochs); n > maxEpochs {
		st.epochs = slices.Delete(st.epochs, 0, n-maxEpochs)
	}
}

// settleLater asks for the latest switch of st to be settled once Settle
// has passed; l.mu must be held.
func (l *Ledger) settleLater(name string, st *crdState) {
	st.gen++
	req := settleRequest{name: name, uid: st.uid, gen: st.gen}
	l.armSettle(req)
}

func (l *Ledger) armSettle(req settleRequest) {
	l.clock.AfterFunc(l.settle, func() {
		select {
		case l.settles <- req:
		default:
			l.armSettle(req) // Run is busy: try again later
		}
	})
}

// settleNow places the writes after the cluster's current revision at the
// storage version of the CRD of req, unless a later switch overtook it.
func (l *Ledger) settleNow(ctx context.Context, req settleRequest) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := l.dyn.Resource(CRDResource).List(ctx, metav1.ListOptions{Limit: 1})
	var rv uint64
	if err == nil {
		rv, err = strconv.ParseUint(list.GetResourceVersion(), 10, 64)
	}
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("the storage-version ledger cannot read the cluster's revision; trying again", "name", req.name, "error", err)
			l.armSettle(req)
		}
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.crds[req.name]; st != nil && st.uid == req.uid && st.gen == req.gen {
		st.push(epoch{version: st.storage, from: rv})
	}
}

// forget drops a deleted CRD.
func (l *Ledger) forget(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.crds[u.GetName()]; st != nil && st.uid == u.GetUID() {
		delete(l.crds, u.GetName())
	}
}

// ledgerStore is the reflector's store: it hands each CRD to the ledger
// and keeps nothing.
type ledgerStore struct{ l *Ledger }

var _ cache.ReflectorStore = ledgerStore{}

func (s ledgerStore) Add(obj any) error {
	h := created
	if u, ok := obj.(*unstructured.Unstructured); ok && s.l.known(u.GetName(), u.GetUID()) {
		h = modified
	}
	s.l.observe(obj, h)
	return nil
}

func (s ledgerStore) Update(obj any) error { s.l.observe(obj, modified); return nil }
func (s ledgerStore) Delete(obj any) error { s.l.forget(obj); return nil }
func (s ledgerStore) Resync() error        { return nil }

// Replace is a list: the first, or one after a watch that could not
// resume (CRDs not in it are gone).
func (s ledgerStore) Replace(list []any, _ string) error {
	h := relisted
	if !s.l.synced.Load() {
		h = listed
	}
	names := map[string]bool{}
	for _, obj := range list {
		s.l.observe(obj, h)
		if u, ok := obj.(*unstructured.Unstructured); ok {
			names[u.GetName()] = true
		}
	}
	s.l.mu.Lock()
	for name := range s.l.crds {
		if !names[name] {
			delete(s.l.crds, name)
		}
	}
	s.l.mu.Unlock()
	s.l.synced.Store(true)
	return nil
}

func (l *Ledger) known(name string, uid types.UID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.crds[name]
	return st != nil && st.uid == uid
}
