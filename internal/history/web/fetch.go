package web

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/jsonscan"
)

// maxScan bounds the entries one request goes through for a caller who
// may read only part of them: past it, the answer holds what it found
// and a cursor to go on from.
const maxScan = 10 * history.MaxLimit

// result is a page of what the caller may read.
type result struct {
	entries []history.Entry
	next    *history.Cursor
}

// fetch returns the entries of q that c may read, newest first: each
// entry's resource and namespace are authorized (cached), and a CRD
// change's objects hit are kept only where c may read them.
func (s *Server) fetch(ctx context.Context, c *caller, q history.Query) (result, error) {
	want := q.Limit
	if want <= 0 || want > history.MaxLimit {
		want = history.DefaultLimit
	}
	if !c.all {
		q.Limit = history.MaxLimit // fewer round trips when much is hidden
	}
	var res result
	for scanned := 0; ; {
		page, err := s.store.Query(ctx, q)
		if err != nil {
			return result{}, err
		}
		for i := range page.Entries {
			e := &page.Entries[i]
			ok, err := s.auth.allowed(ctx, c, e.Group, e.Resource, e.Namespace)
			if err != nil {
				return result{}, err
			}
			if !ok {
				continue
			}
			if !c.all && isCRD(e) {
				if e.Payload, err = s.filterImpact(ctx, c, e.Payload); err != nil {
					return result{}, err
				}
			}
			res.entries = append(res.entries, *e)
			if len(res.entries) == want {
				if i < len(page.Entries)-1 || page.Next != nil {
					cur := history.CursorOf(e)
					res.next = &cur
				}
				return res, nil
			}
		}
		scanned += len(page.Entries)
		if page.Next == nil {
			return res, nil
		}
		if scanned >= maxScan {
			res.next = page.Next
			return res, nil
		}
		q.After = page.Next
	}
}

// isCRD reports whether e is about a CustomResourceDefinition.
func isCRD(e *history.Entry) bool {
	return e.Group == "apiextensions.k8s.io" && e.Resource == "customresourcedefinitions"
}

// filterImpact returns the payload of a CRD change with the objects its
// impact names (crd.impact[].objects) kept only where c may get that
// custom resource in that namespace; each impact that lost some says how
// many in a last key, "hidden". Keys keep their order; other payloads
// come back as they are.
func (s *Server) filterImpact(ctx context.Context, c *caller, payload []byte) ([]byte, error) {
	var crdName string
	var impact []byte
	_ = jsonscan.EachKey(payload, func(key string, value []byte) error {
		if key == "crd" {
			return jsonscan.EachKey(value, func(key string, value []byte) error {
				switch key {
				case "crd":
					_ = json.Unmarshal(value, &crdName)
				case "impact":
					impact = value
				}
				return nil
			})
		}
		return nil
	})
	if len(impact) == 0 || crdName == "" {
		return payload, nil
	}
	resource, group, _ := strings.Cut(crdName, ".")
	var impacts []json.RawMessage
	if err := json.Unmarshal(impact, &impacts); err != nil {
		return payload, nil //nolint:nilerr // not an impact list: nothing to filter
	}
	changed := false
	for i, im := range impacts {
		var objectsValue []byte
		_ = jsonscan.EachKey(im, func(key string, value []byte) error {
			if key == "objects" {
				objectsValue = value
			}
			return nil
		})
		var objects []json.RawMessage
		if json.Unmarshal(objectsValue, &objects) != nil {
			continue
		}
		kept := objects[:0:0]
		for _, o := range objects {
			var ref struct {
				Namespace string `json:"namespace"`
			}
			_ = json.Unmarshal(o, &ref)
			ok, err := s.auth.allowed(ctx, c, group, resource, ref.Namespace)
			if err != nil {
				return nil, err
			}
			if ok {
				kept = append(kept, o)
			}
		}
		if len(kept) == len(objects) {
			continue
		}
		changed = true
		list := []byte{'['}
		for k, o := range kept {
			if k > 0 {
				list = append(list, ',')
			}
			list = append(list, o...)
		}
		list = append(list, ']')
		im = replaceValue(im, objectsValue, list)
		impacts[i] = append(im[:len(im)-1:len(im)-1], fmt.Sprintf(`,"hidden":%d}`, len(objects)-len(kept))...)
	}
	if !changed {
		return payload, nil
	}
	list := []byte{'['}
	for k, im := range impacts {
		if k > 0 {
			list = append(list, ',')
		}
		list = append(list, im...)
	}
	list = append(list, ']')
	return replaceValue(payload, impact, list), nil
}

// replaceValue returns a copy of doc with the bytes of old (a subslice of
// it) replaced by repl.
func replaceValue(doc, old, repl []byte) []byte {
	start := cap(doc) - cap(old)
	out := make([]byte, 0, len(doc)-len(old)+len(repl))
	out = append(out, doc[:start]...)
	out = append(out, repl...)
	return append(out, doc[start+len(old):]...)
}
