package watcher

import (
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
// of resources is not paced by --kube-qps (at 50 a second, 3,000 lists
// and the replay's probes took two minutes): the apiserver's priority and
// fairness paces them (429, which the informer retries after a backoff).
// --kube-qps bounds every other request. Its HTTP/2 connections are
// shared by every watch (its transport is its own: uncompressed).
func newStreamClient(config *rest.Config) (rest.Interface, error) {
	cfg := dynamic.ConfigFor(config)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil
	// Uncompressed: the apiserver gzips a watch stream for a client that
	// accepts it, and each open stream's reader then holds a 32 KiB
	// window and its buffers, 44 KiB a watched resource as measured (75
	// of 104 MiB of heap at 1,713 resources), to save bandwidth on events
	// of a few KiB.
	cfg.DisableCompression = true
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
func (rw *resourceWatch) listAndWatch(ctx context.Context) {
	var (
		b         backoff
		relist    = true
		watchList = clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient)
		stream    eventSource
		err       error
	)
	for ctx.Err() == nil {
		if relist {
			stream, err = rw.sync(ctx, &watchList)
			if err != nil {
				if ctx.Err() == nil {
					rw.w.log.Debug("list failed; retrying", "gvr", rw.res.String(), "error", err)
				}
				b.wait(ctx)
				continue
			}
			relist = false
		}
		if stream == nil {
			stream, err = rw.openWatch(ctx, rw.store.lastRV(), false)
			if err != nil {
				relist = !retryWatch(err)
				if isExpired(err) {
					rw.store.rvGone = true
					relist = true
				}
				b.wait(ctx)
				continue
			}
		}
		started := time.Now()
		n, err := rw.consume(ctx, stream, nil)
		stream.close()
		stream = nil
		switch {
		case ctx.Err() != nil:
			return
		case isExpired(err):
			rw.store.rvGone = true
			relist = true
		case err != nil:
			rw.observeError(err)
			rw.w.log.Debug("watch failed", "gvr", rw.res.String(), "error", err)
			relist = !retryWatch(err)
			b.wait(ctx)
		case n == 0 && time.Since(started) < time.Second:
			// Closed at once with nothing: do not hammer the apiserver.
			b.wait(ctx)
		default:
			b.reset()
		}
	}
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
	return &eventStream{body: body, dec: json.NewDecoder(body)}, nil
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

// eventStream is an open watch: its body and the JSON decoder reading it.
type eventStream struct {
	body io.ReadCloser
	dec  *json.Decoder
}

func (s *eventStream) close() { _ = s.body.Close() }

// next returns the next event, its object as rawObject: decoding it is
// the projection's (decodeProjected).
func (s *eventStream) next(context.Context) (watch.EventType, any, error) {
	var e watchEvent
	if err := s.dec.Decode(&e); err != nil {
		return "", nil, err
	}
	if e.Type == string(watch.Error) {
		return "", nil, statusError(e.Object)
	}
	return watch.EventType(e.Type), rawObject(e.Object), nil
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

// watchEvent is one event of a watch stream as the apiserver writes it.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
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
		var status apierrors.APIStatus
		switch {
		case ctx.Err() != nil || errors.Is(err, io.EOF):
			return n, nil
		case errors.As(err, &status):
			return n, err
		case err != nil:
			return n, fmt.Errorf("read the watch of %s: %w", rw.res, err)
		}
		n++
		switch typ {
		case watch.Bookmark:
			rv, initialEnd, err := bookmark(obj)
			if err != nil {
				return n, fmt.Errorf("a bookmark of %s: %w", rw.res, err)
			}
			if listed != nil && initialEnd {
				if err := rw.store.replace(*listed, rv); err != nil {
					return n, err
				}
				*listed = nil
				return n, errListed
			}
			_ = rw.store.Bookmark(rv)
		case watch.Added:
			if listed != nil {
				o, err := rw.project(obj, true)
				if err != nil {
					return n, err
				}
				*listed = append(*listed, o)
				continue
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
			return n, fmt.Errorf("a watch event of %s of unknown type %q", rw.res, typ)
		}
		if ctx.Err() != nil {
			return n, nil
		}
	}
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
