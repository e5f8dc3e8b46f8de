package watcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"

	"github.com/fieldwatch/fieldwatch/watcher/internal/watchstream"
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
		stream.Close()
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
func (rw *resourceWatch) nextStream(ctx context.Context, lw *lwState) watchstream.Source {
	var stream watchstream.Source
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
func (rw *resourceWatch) sync(ctx context.Context, watchList *bool) (watchstream.Source, error) {
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
			stream.Close()
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
func (rw *resourceWatch) openWatch(ctx context.Context, rv string, initial bool) (watchstream.Source, error) {
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
		return watchstream.FromWatch(wi), nil
	}
	body, err := rw.w.streams.Get().AbsPath(rw.path()...).
		SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.SchemeGroupVersion).
		SetHeader("Accept", rw.accept()).
		Stream(ctx)
	if err != nil {
		rw.observeError(err)
		return nil, err
	}
	return watchstream.NewStream(body), nil
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

// errListed ends the initial events of a watch-list: the bookmark that
// closes them came, and the cache holds them.
var errListed = errors.New("watch-list: initial events done")

// consume reads a watch stream until it ends, applying each event to the
// cache. With listed, the stream is a watch-list's: its initial events
// are collected there until the bookmark that ends them, which replaces
// the cache's content and returns errListed. It returns how many events
// it read.
func (rw *resourceWatch) consume(ctx context.Context, s watchstream.Source, listed *[]*Object) (int, error) {
	n := 0
	for {
		typ, obj, err := s.Next(ctx)
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
		rv, initialEnd, err := watchstream.Bookmark(obj)
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
