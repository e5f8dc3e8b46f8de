package history

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// A page is read in two steps: the heads of the entries (every column but
// the payload, and the payload's size) until the page is full, its byte
// bound reached or its scan window gone through; then the payloads of
// the entries kept. Access is decided, and bytes counted, before a
// payload is read; once Access.Check refused a resource in a namespace,
// the heads of that resource and namespace are left out by the query
// itself.

// head is an entry as the first step reads it: its fields from the
// table's columns, without the payload.
type head struct {
	e    Entry // Payload nil; Version, Kind, ResourceVersion and Manager empty
	time int64 // microseconds: with e.Seq, the entry's place in the order
	size int64 // the payload's bytes
}

// cursor is the place of h: a page whose Next it is goes on with the
// entries older than h.
func (h *head) cursor() Cursor { return Cursor{Time: h.time, Seq: h.e.Seq} }

// before is the place just before h: a page whose Next it is starts at
// h. Sequence numbers are unique, so nothing lies between the two.
func (h *head) before() Cursor { return Cursor{Time: h.time, Seq: h.e.Seq + 1} }

// headSource reads the heads of a query's entries, newest first.
type headSource interface {
	// next returns heads of entries that match every condition of the
	// query the store can check, about n of them (fewer near the end of
	// the window or of the range), leaving out those of the resources
	// and namespaces of refused (Access.Check refused them already); more
	// is false once the source is done.
	next(ctx context.Context, n int, refused []Ref) (heads []head, more bool, err error)
	// scanned returns how many entries the source went through, matching
	// or not: at most the scan window.
	scanned() int
	// windowEnd returns where the scan window ended, nil when the query's
	// range ended within it.
	windowEnd() *Cursor
}

// loadFunc reads the entries of the sequence numbers seqs, with their
// payloads; an entry removed meanwhile is absent from the map.
type loadFunc func(ctx context.Context, seqs []int64) (map[int64]Entry, error)

// checkedChunk is how many heads a page asks its source for at a time
// when Access decides entries one by one, refusing some.
const checkedChunk = 256

// assemble reads a page of q from src and load: see Query for what it
// holds and where it ends.
func assemble(ctx context.Context, q *Query, src headSource, load loadFunc) (Page, error) {
	limit := q.limit()
	var checked map[GroupResource]bool
	if a := q.Access; a != nil && len(a.Checked) > 0 {
		checked = make(map[GroupResource]bool, len(a.Checked))
		for _, gr := range a.Checked {
			checked[gr] = true
		}
	}
	var (
		kept  []head
		bytes int64
		next  *Cursor
		done  bool
		// refused are the resources and namespaces Check refused: the
		// source leaves their entries out from then on, instead of
		// reading each to be refused again.
		refused []Ref
	)
	for !done {
		n := limit + 1 - len(kept)
		if checked != nil {
			n = max(n, checkedChunk)
		}
		heads, more, err := src.next(ctx, n, refused)
		if err != nil {
			return Page{}, err
		}
		for i := range heads {
			h := &heads[i]
			if checked[GroupResource{h.e.Group, h.e.Resource}] {
				ref := Ref{GroupResource: GroupResource{h.e.Group, h.e.Resource}, Namespace: h.e.Namespace, Name: h.e.Name}
				ok, err := q.Access.Check(ctx, ref)
				if errors.Is(err, ErrStop) {
					c := h.before()
					next, done = &c, true
					break
				}
				if err != nil {
					return Page{}, err
				}
				if !ok {
					// The decision is by namespace, unless the query names
					// the object (then by name too, which the query
					// filters on already).
					ref.Name = ""
					if !slices.Contains(refused, ref) {
						refused = append(refused, ref)
					}
					continue
				}
			}
			if len(kept) == limit {
				c := kept[len(kept)-1].cursor()
				next, done = &c, true
				break
			}
			switch {
			case q.MaxBytes > 0 && h.size > q.MaxBytes:
				h.e.Omitted = h.size
			case q.MaxBytes > 0 && bytes+h.size > q.MaxBytes:
				c := kept[len(kept)-1].cursor()
				next, done = &c, true
			default:
				bytes += h.size
			}
			if done {
				break
			}
			kept = append(kept, *h)
		}
		if !done && !more {
			next, done = src.windowEnd(), true
		}
	}
	p := Page{Next: next, Scanned: src.scanned()}
	if len(kept) == 0 {
		return p, nil
	}
	if q.Reserve != nil && bytes > 0 && !q.Reserve(bytes) {
		return Page{}, fmt.Errorf("%w: a page of %d bytes", ErrBusy, bytes)
	}
	seqs := make([]int64, 0, len(kept))
	for i := range kept {
		if kept[i].e.Omitted == 0 {
			seqs = append(seqs, kept[i].e.Seq)
		}
	}
	var loaded map[int64]Entry
	if len(seqs) > 0 {
		var err error
		if loaded, err = load(ctx, seqs); err != nil {
			return Page{}, err
		}
	}
	p.Entries = make([]Entry, 0, len(kept))
	for i := range kept {
		h := &kept[i]
		if h.e.Omitted > 0 {
			p.Entries = append(p.Entries, h.e)
		} else if e, ok := loaded[h.e.Seq]; ok {
			p.Entries = append(p.Entries, e)
		}
	}
	return p, nil
}

// headOf builds a head from the columns of a head query: seq, time
// (microseconds), id, recorded, rule, type, grp, resource, namespace,
// name, uid, usr, imp, cluster, source and the payload's length.
func headOf(scan func(dest ...any) error) (head, error) {
	var h head
	var recorded int64
	var typ, source string
	e := &h.e
	if err := scan(&e.Seq, &h.time, &e.ID, &recorded, &e.Rule, &typ, &e.Group, &e.Resource, &e.Namespace, &e.Name,
		&e.UID, &e.User, &e.Impersonated, &e.Cluster, &source, &h.size); err != nil {
		return head{}, err
	}
	e.Type, e.Source = change.Type(typ), Source(source)
	e.Time, e.Recorded = time.UnixMicro(h.time).UTC(), time.UnixMicro(recorded).UTC()
	return h, nil
}
