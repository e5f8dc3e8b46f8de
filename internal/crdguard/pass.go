package crdguard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/crd/impact"
)

// errLimit stops a pass at Options.MaxObjects.
var errLimit = errors.New("object limit")

// pass is one read of a CRD's objects for a review: it counts them (per
// namespace for a deletion), places them with the ledger for the
// versions the change removes, and hands whole ones to the impact scan.
type pass struct {
	ctx      context.Context
	max      int
	progress *progress
	read     int
	total    int
	all      tally
	// byNS counts per namespace (deletions only).
	byNS map[string]*tally
	// unmigrated counts the objects stored at the versions the change
	// removes (nil when it removes none).
	unmigrated *Unmigrated
	// written counts the objects some client writes in a way the change
	// ends (nil when none is looked for).
	written map[writes]*tally
	group   string
	scan    *scanPool // nil when no object is scanned
}

// writes is a way of writing objects a change can end: at a version (sub
// ""), or a subresource of a version.
type writes struct{ version, sub string }

func newPass(ctx context.Context, max int, p *progress) *pass {
	return &pass{ctx: ctx, max: max, progress: p, total: -1}
}

// add is the Source's callback.
func (p *pass) add(it Item, total int) error {
	if p.read >= p.max {
		return errLimit
	}
	if err := p.ctx.Err(); err != nil {
		return err
	}
	p.read++
	p.total = total
	p.progress.read.Store(int64(p.read))
	p.progress.total.Store(int64(total))
	p.all.add(it.Namespace, it.Name)
	if p.byNS != nil {
		t := p.byNS[it.Namespace]
		if t == nil {
			t = &tally{}
			p.byNS[it.Namespace] = t
		}
		t.add(it.Namespace, it.Name)
	}
	if p.unmigrated != nil {
		p.unmigrated.Add(it.Namespace, it.Name, it.ResourceVersion)
	}
	if len(p.written) > 0 {
		p.countWriters(it)
	}
	if p.scan != nil && it.Content != nil {
		p.scan.add(it.Content)
	}
	return nil
}

// incomplete says why a pass that ended with err did not read every
// object ("" when it did).
func (p *pass) incomplete(err error, maxFlag string) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errLimit):
		return fmt.Sprintf("stopped at %s (%s)", strings.TrimSuffix(readOf(p.read, p.total), " read"), maxFlag)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return fmt.Sprintf("out of time after %s", readOf(p.read, p.total))
	}
	return fmt.Sprintf("%v; %s", err, readOf(p.read, p.total))
}

// reason is the metric label of an incomplete pass.
func reason(err error) string {
	switch {
	case errors.Is(err, errLimit):
		return "limit"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return "timeout"
	}
	return "error"
}

// scanBatch is how many objects a scan worker takes at once.
const scanBatch = 128

// scanPool runs the impact scan of one review on up to max goroutines,
// each with its own impact.Scanner, merged at the end: a goroutine is
// started at the first batch, and another each time a batch finds them
// all busy.
type scanPool struct {
	ctx     context.Context
	crd     *apiextensionsv1.CustomResourceDefinition
	res     *diff.Result
	max     int
	started int
	batch   []Content
	work    chan []Content
	wg      sync.WaitGroup
	scanned atomic.Int64

	mu       sync.Mutex
	scanners []*impact.Scanner
	err      error
}

func newScanPool(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, res *diff.Result, workers int) *scanPool {
	return &scanPool{ctx: ctx, crd: crd, res: res, max: workers, work: make(chan []Content, workers)}
}

func (s *scanPool) add(c Content) {
	s.batch = append(s.batch, c)
	if len(s.batch) == scanBatch {
		s.flush()
	}
}

func (s *scanPool) flush() {
	if len(s.batch) == 0 {
		return
	}
	b := s.batch
	s.batch = make([]Content, 0, scanBatch)
	if s.started == 0 {
		s.start()
	}
	select {
	case s.work <- b:
		return
	default:
	}
	if s.started < s.max {
		s.start()
	}
	select {
	case s.work <- b:
	case <-s.ctx.Done():
	}
}

func (s *scanPool) start() {
	s.started++
	s.wg.Go(s.worker)
}

// worker scans batches until the work ends; it drains what is left when
// its scanner cannot be built, the time is up or it fails.
func (s *scanPool) worker() {
	defer func() {
		if r := recover(); r != nil {
			s.fail(fmt.Errorf("impact scan: %v", r))
			for range s.work {
			}
		}
	}()
	sc, err := impact.New(s.crd, s.res)
	if err != nil {
		s.fail(err)
		for range s.work {
		}
		return
	}
	s.mu.Lock()
	s.scanners = append(s.scanners, sc)
	s.mu.Unlock()
	for b := range s.work {
		for _, c := range b {
			if s.ctx.Err() != nil {
				break
			}
			if err := sc.Add(s.ctx, c.Map()); err != nil {
				s.fail(err)
				break
			}
			s.scanned.Add(1)
		}
	}
}

func (s *scanPool) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// finish waits for the workers and records the merged impact in the
// Result (Impact, Scanned). The error says why objects were not scanned.
func (s *scanPool) finish() error {
	s.flush()
	close(s.work)
	s.wg.Wait()
	if len(s.scanners) > 0 {
		for _, o := range s.scanners[1:] {
			s.scanners[0].Merge(o)
		}
		s.scanners[0].Finish()
	}
	return s.err
}

// countWriters counts it once for each way of writing that one of its
// writers uses.
func (p *pass) countWriters(it Item) {
	for w, t := range p.written {
		for _, wr := range it.Writers {
			if wr.APIVersion == apiVersion(p.group, w.version) && (w.sub == "" || wr.Subresource == w.sub) {
				t.add(it.Namespace, it.Name)
				break
			}
		}
	}
}

func apiVersion(group, version string) string {
	if group == "" {
		return version
	}
	return group + "/" + version
}
