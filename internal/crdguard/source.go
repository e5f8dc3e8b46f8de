package crdguard

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
)

// Need says what a Source must hand over of each object besides its
// namespace, name and resourceVersion.
type Need int

const (
	// Whole asks for the whole object (Item.Content).
	Whole Need = 1 << iota
	// Writers asks for the writers of each object, from its
	// managedFields (Item.Writers).
	Writers
)

// Item is one object a Source hands over.
type Item struct {
	Namespace, Name, ResourceVersion string
	// Content is the whole object when the Source was asked for Whole,
	// nil otherwise.
	Content Content
	// Writers are the object's managedFields entries when the Source
	// was asked for Writers.
	Writers []Writer
}

// Writer is one metadata.managedFields entry: a client that wrote the
// object, at APIVersion, through Subresource ("" for the object itself).
type Writer struct {
	Manager, APIVersion, Subresource string
}

// Content is a whole object, decoded on demand: Map returns it as plain
// JSON values (map[string]any, []any, string, bool, int64, float64,
// nil), a map the caller may keep but must not modify.
// *watcher.Object implements it.
type Content interface {
	Map() map[string]any
}

// plainMap is an object a list returned, already decoded.
type plainMap map[string]any

func (m plainMap) Map() map[string]any { return m }

// Source gives the guard the objects of the resource a CRD defines, as
// they are now.
type Source interface {
	// Objects calls fn with each object of res (of its group and
	// resource; res.Version is the version to list at, where the source
	// lists), with what need asks for. total is how many objects the source
	// expects in all as it calls fn (-1 when it does not know). Objects
	// stops at fn's first error and returns it, with origin: where the
	// objects came from ("cache", "list"). It returns an error wrapping
	// ErrUnavailable, before any call of fn, when it does not hold these
	// objects.
	Objects(ctx context.Context, res schema.GroupVersionResource, need Need, fn func(it Item, total int) error) (origin string, err error)
}

// ErrUnavailable says that a Source does not hold the objects asked for:
// Chain then asks the next.
var ErrUnavailable = errors.New("objects not available here")

// Chain asks each of its Sources in turn, until one holds the objects.
type Chain []Source

var _ Source = Chain{}

// Objects implements Source.
func (c Chain) Objects(ctx context.Context, res schema.GroupVersionResource, need Need, fn func(Item, int) error) (string, error) {
	var why []error
	for _, s := range c {
		origin, err := s.Objects(ctx, res, need, fn)
		if !errors.Is(err, ErrUnavailable) {
			return origin, err
		}
		why = append(why, err)
	}
	return "none", errors.Join(why...)
}

// CacheSource hands over the objects fieldwatch's watcher caches: a
// resource it watches in every namespace, whole when the rules keep whole
// objects (asked for Whole). It never has Writers: the cache keeps no
// managedFields entry's apiVersion.
type CacheSource struct {
	// Cache returns the watcher, nil when there is none (yet).
	Cache func() Cache
}

var _ Source = CacheSource{}

// Objects implements Source.
func (s CacheSource) Objects(_ context.Context, res schema.GroupVersionResource, need Need, fn func(Item, int) error) (string, error) {
	if need&Writers != 0 {
		return "cache", fmt.Errorf("%w: the cache keeps no writer's apiVersion", ErrUnavailable)
	}
	whole := need&Whole != 0
	c := s.Cache()
	if c == nil {
		return "cache", fmt.Errorf("%w: no watcher", ErrUnavailable)
	}
	snap, err := c.Cached(res.GroupResource())
	if err != nil {
		return "cache", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if whole && !snap.Projection.Full {
		return "cache", fmt.Errorf("%w: cached without all their fields", ErrUnavailable)
	}
	total := len(snap.Objects)
	for _, o := range snap.Objects {
		it := Item{Namespace: o.GetNamespace(), Name: o.GetName(), ResourceVersion: o.GetResourceVersion()}
		if whole {
			it.Content = o
		}
		if err := fn(it, total); err != nil {
			return "cache", err
		}
	}
	return "cache", nil
}

// DefaultPageSize is ListSource's default page size.
const DefaultPageSize = 500

// ListSource lists the objects from the apiserver in pages: whole ones
// through the dynamic client, metadata only through the metadata client.
type ListSource struct {
	Dynamic  dynamic.Interface
	Metadata metadata.Interface
	// PageSize is the objects asked for per page (default
	// DefaultPageSize).
	PageSize int64
}

var _ Source = ListSource{}

// Objects implements Source. A list that fails after some pages returns
// its error with the objects handed over so far.
func (s ListSource) Objects(ctx context.Context, res schema.GroupVersionResource, need Need, fn func(Item, int) error) (string, error) {
	whole, writers := need&Whole != 0, need&Writers != 0
	size := s.PageSize
	if size <= 0 {
		size = DefaultPageSize
	}
	opts := metav1.ListOptions{Limit: size}
	seen := 0
	total := func(items int, remaining *int64) int {
		if remaining == nil {
			if opts.Continue == "" {
				return seen + items // the last page
			}
			return -1
		}
		return seen + items + int(*remaining)
	}
	for {
		var (
			next      string
			remaining *int64
			items     []Item
		)
		if whole {
			list, err := s.Dynamic.Resource(res).List(ctx, opts)
			if err != nil {
				return "list", fmt.Errorf("list %s: %w", res, err)
			}
			next, remaining = list.GetContinue(), list.GetRemainingItemCount()
			items = make([]Item, len(list.Items))
			for i := range list.Items {
				o := &list.Items[i]
				items[i] = Item{Namespace: o.GetNamespace(), Name: o.GetName(), ResourceVersion: o.GetResourceVersion(), Content: plainMap(o.Object)}
				if writers {
					items[i].Writers = writersOf(o.Object)
				}
			}
		} else {
			list, err := s.Metadata.Resource(res).List(ctx, opts)
			if err != nil {
				return "list", fmt.Errorf("list %s: %w", res, err)
			}
			next, remaining = list.Continue, list.RemainingItemCount
			items = make([]Item, len(list.Items))
			for i := range list.Items {
				o := &list.Items[i]
				items[i] = Item{Namespace: o.Namespace, Name: o.Name, ResourceVersion: o.ResourceVersion}
				if writers {
					for _, e := range o.ManagedFields {
						items[i].Writers = append(items[i].Writers, Writer{Manager: e.Manager, APIVersion: e.APIVersion, Subresource: e.Subresource})
					}
				}
			}
		}
		opts.Continue = next
		n := total(len(items), remaining)
		for _, it := range items {
			if err := fn(it, n); err != nil {
				return "list", err
			}
		}
		seen += len(items)
		if next == "" {
			return "list", nil
		}
	}
}

// writersOf reads the managedFields entries of an object given as plain
// JSON values.
func writersOf(obj map[string]any) []Writer {
	meta, _ := obj["metadata"].(map[string]any)
	entries, _ := meta["managedFields"].([]any)
	out := make([]Writer, 0, len(entries))
	for _, e := range entries {
		m, _ := e.(map[string]any)
		manager, _ := m["manager"].(string)
		apiVersion, _ := m["apiVersion"].(string)
		sub, _ := m["subresource"].(string)
		out = append(out, Writer{Manager: manager, APIVersion: apiVersion, Subresource: sub})
	}
	return out
}
