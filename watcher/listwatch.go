package watcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/internal/jsonscan"
)

// The informer of a resource is one goroutine, listAndWatch: it fills the
// resource's objectStore from a list and keeps it current from a watch,
// reading and decoding the watch stream itself. A client-go Reflector
// spends three goroutines on the same (its loop, a resync timer that the
// watcher never uses, and a stream decoder); with the HTTP/2 stream's own
// goroutine in net/http, a watched resource costs two goroutines here,
// and its watch shares the client's HTTP/2 connections with every other.
//
// The list is a watch-list where the apiserver serves one (its initial
// events, then a bookmark, fill the cache, and the same stream goes on as
// the watch), else a paginated list; a replay's first list is a list at
// the previous run's watermark (see resourceWatch.list). What happens on
// errors follows client-go's Reflector: a watch that ends is resumed from
// the cache's resourceVersion; one the apiserver can no longer serve (410
// Gone, too old) relists; other failures relist after a backoff
// (800 ms doubling to 30 s, with jitter), connection refused and 429 only
// rewatch.

// newStreamClient returns the REST client informers list and watch with:
// the dynamic client's configuration (JSON), without client-side
// throttling. client-go never throttles watches, and so not a watch-list,
// which is how an informer starts where the apiserver serves it; the
// paginated lists of a replay from the watermark, or of an apiserver
// without watch-lists, go unthrottled too, so that a start with thousands
// of resources is not paced by --kube-qps: the apiserver's priority and
// fairness paces them (429, which the informer retries after a backoff).
// --kube-qps bounds every other request. Its HTTP/2 connections are
// shared by every watch (its transport is its own: uncompressed, and a
// request dials only when the connections there are cannot take it, one
// at a time, see dial.go).
func newStreamClient(config *rest.Config) (rest.Interface, error) {
	cfg := dynamic.ConfigFor(config)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil
	// Uncompressed: the apiserver gzips a watch stream for a client that
	// accepts it, and each open stream's reader then holds its window and
	// buffers for the stream's life, most of the heap a quiet watch
	// costs, to save bandwidth on events of a few KiB (`make bench
	// -sections crds` measures the heap a watched resource).
	cfg.DisableCompression = true
	gt, err := newGatedTransport(cfg)
	if err != nil {
		return nil, fmt.Errorf("watch client: %w", err)
	}
	if gt != nil {
		// The transport holds the TLS settings (see dial.go).
		cfg.Transport = gt
		cfg.TLSClientConfig = rest.TLSClientConfig{}
	}
	rc, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("watch client: %w", err)
	}
	return rc, nil
}

// Watch timeouts, as client-go's Reflector sets them: a random time
// between the two, so that the watches of many resources do not all end
// at once.
const (
	minWatchTimeout = 5 * time.Minute
	maxWatchTimeout = 10 * time.Minute
)

// backoff is the wait between failed attempts.
type backoff struct{ next time.Duration }

func (b *backoff) reset() { b.next = 0 }

// wait waits before the next attempt; it returns false when ctx ends.
func (b *backoff) wait(ctx context.Context) bool {
	switch {
	case b.next == 0:
		b.next = 800 * time.Millisecond
	case b.next < 30*time.Second:
		b.next = min(2*b.next, 30*time.Second)
	}
	d := b.next + time.Duration(rand.Int64N(int64(b.next)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// listAndWatch runs the informer until ctx ends.
//
// The goroutine spends its life parked in its watch stream's read, beneath
// listAndWatch and consume: both keep their frames small (the work before
// and after a read is in functions of their own), so that the runtime can
// shrink the parked goroutine's stack to its smallest size. With thousands
// of resources, stacks are much of what quiet watches cost (`make bench
// -sections crds` reports them).
func (rw *resourceWatch) listAndWatch(ctx context.Context) {
	lw := &lwState{relist: true, watchList: clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient)}
	for ctx.Err() == nil {
		stream := rw.nextStream(ctx, lw)
		if stream == nil {
			continue
		}
		n, err := rw.consume(ctx, stream, nil)
		stream.close()
		if rw.watchEnded(ctx, lw, n, err) {
			return
		}
	}
}

// lwState is what listAndWatch keeps between watches.
type lwState struct {
	b         backoff
	relist    bool
	watchList bool
	// started is when the watch being consumed was opened.
	started time.Time
}

// nextStream lists when a relist is due, then returns the watch to
// consume; nil after a failure (it waited its backoff).
//
//go:noinline
func (rw *resourceWatch) nextStream(ctx context.Context, lw *lwState) eventSource {
	var stream eventSource
	if lw.relist {
		var err error
		stream, err = rw.sync(ctx, &lw.watchList)
		if err != nil {
			if ctx.Err() == nil {
				rw.w.log.Debug("list failed; retrying", "gvr", rw.res.String(), "error", err)
			}
			lw.b.wait(ctx)
			return nil
		}
		lw.relist = false
	}
	if stream == nil {
		var err error
		stream, err = rw.openWatch(ctx, rw.store.lastRV(), false)
		if err != nil {
			lw.relist = !retryWatch(err)
			if isExpired(err) {
				rw.store.rvGone = true
				lw.relist = true
			}
			lw.b.wait(ctx)
			return nil
		}
	}
	lw.started = time.Now()
	return stream
}

// watchEnded decides what follows a watch that ended after n events
// with err: a relist, a backoff, or a new watch at once. It returns true
// when ctx ended.
//
//go:noinline
func (rw *resourceWatch) watchEnded(ctx context.Context, lw *lwState, n int, err error) bool {
	switch {
	case ctx.Err() != nil:
		return true
	case isExpired(err):
		rw.store.rvGone = true
		lw.relist = true
	case err != nil:
		rw.observeError(err)
		rw.w.log.Debug("watch failed", "gvr", rw.res.String(), "error", err)
		lw.relist = !retryWatch(err)
		lw.b.wait(ctx)
	case n == 0 && time.Since(lw.started) < time.Second:
		// Closed at once with nothing: do not hammer the apiserver.
		lw.b.wait(ctx)
	default:
		lw.b.reset()
	}
	return false
}

// retryWatch reports whether a failed watch is retried as a watch (the
// apiserver refused the connection, or asked to slow down) rather than
// with a relist.
func retryWatch(err error) bool {
	return utilnet.IsConnectionRefused(err) || apierrors.IsTooManyRequests(err) || errors.Is(err, io.ErrUnexpectedEOF) || utilnet.IsProbableEOF(err)
}

// isExpired reports whether the apiserver can no longer serve the
// resourceVersion a watch or list asked for.
func isExpired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) ||
		apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)
}

// sync fills the cache: with a watch-list, whose stream it returns to
// go on as the watch, where the apiserver serves one (*watchList is
// cleared when it does not); with a list otherwise.
func (rw *resourceWatch) sync(ctx context.Context, watchList *bool) (eventSource, error) {
	rv := rw.store.lastRV()
	if rw.store.rvGone {
		rv = ""
	}
	if *watchList && rw.resume == "" {
		rw.store.listStarted = time.Now()
		stream, err := rw.openWatch(ctx, rv, true)
		if err == nil {
			var listed []*Object
			var n int
			n, err = rw.consume(ctx, stream, &listed)
			if err == nil {
				err = fmt.Errorf("the watch-list ended after %d events without its closing bookmark", n)
			}
			if errors.Is(err, errListed) {
				rw.store.rvGone = false
				return stream, nil
			}
			stream.close()
		}
		switch {
		case ctx.Err() != nil:
			return nil, err
		case isExpired(err):
			rw.store.rvGone = true
			rv = ""
		case apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) || apierrors.IsMethodNotSupported(err) || apierrors.IsNotAcceptable(err):
			// An apiserver without watch-lists: list from now on.
			rw.w.log.Info("the apiserver serves no watch-list; listing instead", "gvr", rw.res.String(), "error", err)
			*watchList = false
		default:
			// As client-go's Reflector does: a list at once, not a
			// backoff (the watch cache of a resource just created may
			// not serve a watch-list yet).
			rw.w.log.Debug("watch-list failed; listing instead", "gvr", rw.res.String(), "error", err)
		}
	}
	return nil, rw.listAll(ctx, rv)
}

// listAll fills the cache from a paginated list. Each page is projected
// as it comes, so that what a list holds at once is one page and the
// projected objects.
func (rw *resourceWatch) listAll(ctx context.Context, rv string) error {
	rw.store.listStarted = time.Now()
	var listed []*Object
	opts := metav1.ListOptions{Limit: 500}
	if rw.resume == "" && rv != "" {
		opts.ResourceVersion, opts.ResourceVersionMatch = rv, metav1.ResourceVersionMatchNotOlderThan
	}
	for {
		rw.lists.Inc()
		o := opts
		rw.w.cfg.Shard.apply(&o)
		list, err := rw.list(ctx, rw.client, o)
		rw.observeError(err)
		if apierrors.IsResourceExpired(err) && opts.Continue != "" {
			// The continue token expired: list again from the start.
			opts.Continue, listed = "", nil
			continue
		}
		if err != nil {
			return err
		}
		for i := range list.Items {
			obj, err := rw.project(&list.Items[i], true)
			if err != nil {
				return err
			}
			listed = append(listed, obj)
		}
		if list.GetContinue() == "" {
			rw.resume = "" // a replay's list at the watermark went through
			rw.store.rvGone = false
			return rw.store.replace(listed, list.GetResourceVersion())
		}
		opts.Continue = list.GetContinue()
		// Later pages come at the first one's resourceVersion.
		opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
	}
}

// openWatch starts a watch from rv; initial makes it a watch-list (its
// initial events, then a bookmark, are the state at rv or later). The
// stream is read in the informer's goroutine, as JSON, unless client-go's
// CBOR is allowed (ClientsAllowCBOR): then client-go's watch decodes it,
// in a goroutine of its own.
func (rw *resourceWatch) openWatch(ctx context.Context, rv string, initial bool) (eventSource, error) {
	timeout := int64((minWatchTimeout + time.Duration(rand.Int64N(int64(maxWatchTimeout-minWatchTimeout)))).Seconds())
	opts := metav1.ListOptions{Watch: true, ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout}
	if initial {
		send := true
		opts.SendInitialEvents = &send
		opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	rw.w.cfg.Shard.apply(&opts)
	rw.watches.Inc()
	if rw.w.streams == nil || clientfeatures.FeatureGates().Enabled(clientfeatures.ClientsAllowCBOR) {
		wi, err := rw.client.Watch(ctx, opts)
		if err != nil {
			rw.observeError(err)
			return nil, err
		}
		return watchSource{wi}, nil
	}
	body, err := rw.w.streams.Get().AbsPath(rw.path()...).
		SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.SchemeGroupVersion).
		SetHeader("Accept", rw.accept()).
		Stream(ctx)
	if err != nil {
		rw.observeError(err)
		return nil, err
	}
	return newEventStream(body), nil
}

// eventSource is an open watch: next returns its events one by one, with
// io.EOF once it ended, and the API error of an ERROR event.
type eventSource interface {
	next(ctx context.Context) (watch.EventType, any, error)
	close()
}

// accept is what the informer's watch asks for: the objects, or their
// metadata only (metaOnly).
func (rw *resourceWatch) accept() string {
	if rw.metaOnly {
		return "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
	}
	return "application/json"
}

// path is the URL path of the resource's collection.
func (rw *resourceWatch) path() []string {
	var p []string
	if rw.res.Group == "" {
		p = append(p, "api")
	} else {
		p = append(p, "apis", rw.res.Group)
	}
	p = append(p, rw.res.Version)
	if rw.namespace != "" {
		p = append(p, "namespaces", rw.namespace)
	}
	return append(p, rw.res.Resource)
}

// eventStream is an open watch: its body, read as the apiserver writes
// it (JSON objects one after the other), framed with jsonscan. A watch
// that waits for its next event holds idle, not a buffer the size of its
// largest event (as a json.Decoder would keep); an event larger than idle
// is read into a buffer of its own, twice what it holds at most, dropped
// once its events are handed on. (Not a pool's: at a start thousands of watches wait, each within
// its initial events, and a pool's buffers outlive the start.)
type eventStream struct {
	body  io.ReadCloser
	frame jsonscan.Framer
	// buf[off:] is what was read and not handed on: in idle, or in a
	// buffer of its own (grown).
	buf   []byte
	off   int
	grown bool
	// err is the error of a read that returned bytes too, for when
	// they are handed on.
	err  error
	idle [idleRead]byte
}

const (
	// idleRead is what a watch waiting for an event reads into: a
	// bookmark, a deletion or a small object's event fits.
	idleRead = 512
	// maxEvent bounds a watch event (the apiserver's objects are at most
	// a few MiB): a stream that sends a larger one is read no further.
	maxEvent = 128 << 20
)

func newEventStream(body io.ReadCloser) *eventStream { return &eventStream{body: body} }

func (s *eventStream) close() {
	_ = s.body.Close()
	s.drop()
}

// next returns the next event, its object as rawObject: decoding it is
// the projection's (decodeProjected).
func (s *eventStream) next(context.Context) (watch.EventType, any, error) {
	for {
		if s.off < len(s.buf) {
			n, err := s.frame.Next(s.buf[s.off:])
			if err != nil {
				return "", nil, err
			}
			if n > 0 {
				event := s.buf[s.off : s.off+n]
				s.off += n
				typ, obj, err := decodeEvent(event)
				if s.off == len(s.buf) {
					s.drop()
				}
				return typ, obj, err
			}
		}
		if err := s.fill(); err != nil {
			return "", nil, err
		}
	}
}

// fill reads more of the stream: into idle when nothing is under way
// (what is left is whitespace between events), else into the buffer's
// free room, taking a buffer, or a larger one, when it has too little.
func (s *eventStream) fill() error {
	if s.err != nil {
		return s.endErr()
	}
	if len(bytes.TrimLeft(s.buf[s.off:], " \t\r\n")) == 0 {
		s.drop()
		n, err := s.body.Read(s.idle[:])
		s.buf, s.off, s.err = s.idle[:n], 0, err
		if n == 0 && err != nil {
			return s.endErr()
		}
		return nil
	}
	if s.grown && s.off > 0 {
		s.buf = s.buf[:copy(s.buf, s.buf[s.off:])]
		s.off = 0
	}
	if rest := len(s.buf) - s.off; !s.grown || cap(s.buf)-len(s.buf) < idleRead {
		if rest > maxEvent {
			return fmt.Errorf("a watch event of more than %d MiB", maxEvent>>20)
		}
		b := append(make([]byte, 0, 2*(rest+idleRead)), s.buf[s.off:]...)
		s.buf, s.off, s.grown = b, 0, true
	}
	n, err := s.body.Read(s.buf[len(s.buf):cap(s.buf)])
	s.buf, s.err = s.buf[:len(s.buf)+n], err
	if n == 0 && err != nil {
		return s.endErr()
	}
	return nil
}

// endErr is the error that ends the stream: io.ErrUnexpectedEOF when it
// ended inside an event.
func (s *eventStream) endErr() error {
	if errors.Is(s.err, io.EOF) && len(bytes.TrimSpace(s.buf[s.off:])) > 0 {
		return io.ErrUnexpectedEOF
	}
	return s.err
}

// drop lets the buffer go (its content was handed on).
func (s *eventStream) drop() { s.buf, s.off, s.grown = nil, 0, false }

// decodeEvent returns the type of a watch event and its object, a copy
// (the event's bytes are the stream's buffer); an ERROR event's Status as
// its API error.
func decodeEvent(event []byte) (watch.EventType, any, error) {
	var typ string
	var obj []byte
	err := jsonscan.EachKey(event, func(key string, value []byte) error {
		switch key {
		case "type":
			if len(value) < 2 || value[0] != '"' {
				return jsonscan.ErrSyntax
			}
			t, err := jsonscan.Key(value)
			typ = t
			return err
		case "object":
			obj = value
		}
		return nil
	})
	switch {
	case err != nil:
		return "", nil, fmt.Errorf("a watch event: %w", err)
	case obj == nil:
		return "", nil, fmt.Errorf("a watch event of type %q without its object", typ)
	case typ == string(watch.Error):
		return "", nil, statusError(obj)
	}
	return watch.EventType(typ), rawObject(bytes.Clone(obj)), nil
}

// watchSource is a client-go watch as an eventSource.
type watchSource struct{ wi watch.Interface }

func (s watchSource) close() { s.wi.Stop() }

func (s watchSource) next(ctx context.Context) (watch.EventType, any, error) {
	select {
	case <-ctx.Done():
		return "", nil, io.EOF
	case e, ok := <-s.wi.ResultChan():
		switch {
		case !ok:
			return "", nil, io.EOF
		case e.Type == watch.Error:
			return "", nil, apierrors.FromObject(e.Object)
		}
		obj, ok := e.Object.(*unstructured.Unstructured)
		if !ok {
			return "", nil, fmt.Errorf("a watch event of type %T", e.Object)
		}
		return e.Type, obj, nil
	}
}

// errListed ends the initial events of a watch-list: the bookmark that
// closes them came, and the cache holds them.
var errListed = errors.New("watch-list: initial events done")

// consume reads a watch stream until it ends, applying each event to the
// cache. With listed, the stream is a watch-list's: its initial events
// are collected there until the bookmark that ends them, which replaces
// the cache's content and returns errListed. It returns how many events
// it read.
func (rw *resourceWatch) consume(ctx context.Context, s eventSource, listed *[]*Object) (int, error) {
	n := 0
	for {
		typ, obj, err := s.next(ctx)
		if err = rw.apply(ctx, typ, obj, err, listed, &n); err != nil {
			if err == errStreamEnd {
				err = nil
			}
			return n, err
		}
	}
}

// errStreamEnd is apply's word for a stream that ended without an error.
var errStreamEnd = errors.New("the watch stream ended")

// apply applies what consume read (an event, or the error that ended the
// stream) and counts events in n. It returns errStreamEnd, errListed or
// the error that ends the stream, nil to read on.
//
//go:noinline
func (rw *resourceWatch) apply(ctx context.Context, typ watch.EventType, obj any, err error, listed *[]*Object, n *int) error {
	var status apierrors.APIStatus
	switch {
	case ctx.Err() != nil || errors.Is(err, io.EOF):
		return errStreamEnd
	case errors.As(err, &status):
		return err
	case err != nil:
		return fmt.Errorf("read the watch of %s: %w", rw.res, err)
	}
	*n++
	switch typ {
	case watch.Bookmark:
		rv, initialEnd, err := bookmark(obj)
		if err != nil {
			return fmt.Errorf("a bookmark of %s: %w", rw.res, err)
		}
		if listed != nil && initialEnd {
			if err := rw.store.replace(*listed, rv); err != nil {
				return err
			}
			*listed = nil
			return errListed
		}
		_ = rw.store.Bookmark(rv)
	case watch.Added:
		if listed != nil {
			o, err := rw.project(obj, true)
			if err != nil {
				return err
			}
			*listed = append(*listed, o)
			return nil
		}
		if err := rw.store.Add(obj); err != nil {
			rw.w.log.Error("cannot apply a watch event", "gvr", rw.res.String(), "error", err)
		}
	case watch.Modified:
		if err := rw.store.Update(obj); err != nil {
			rw.w.log.Error("cannot apply a watch event", "gvr", rw.res.String(), "error", err)
		}
	case watch.Deleted:
		if err := rw.store.Delete(obj); err != nil {
			rw.w.log.Error("cannot apply a watch event", "gvr", rw.res.String(), "error", err)
		}
	default:
		return fmt.Errorf("a watch event of %s of unknown type %q", rw.res, typ)
	}
	if ctx.Err() != nil {
		return errStreamEnd
	}
	return nil
}

// bookmark returns the resourceVersion of a bookmark's object, and
// whether it ends a watch-list's initial events.
func bookmark(obj any) (rv string, initialEnd bool, err error) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		return o.GetResourceVersion(), o.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true", nil
	case rawObject:
		var b struct {
			Metadata struct {
				ResourceVersion string            `json:"resourceVersion"`
				Annotations     map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(o, &b); err != nil {
			return "", false, err
		}
		return b.Metadata.ResourceVersion, b.Metadata.Annotations[metav1.InitialEventsAnnotationKey] == "true", nil
	}
	return "", false, fmt.Errorf("unexpected object type %T", obj)
}

// statusError turns the Status of an ERROR event into its API error.
func statusError(raw json.RawMessage) error {
	var st metav1.Status
	if err := json.Unmarshal(raw, &st); err != nil || st.Status == "" {
		return fmt.Errorf("a watch error event: %s", raw)
	}
	return &apierrors.StatusError{ErrStatus: st}
}
