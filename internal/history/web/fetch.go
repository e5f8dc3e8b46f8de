package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/history"
)

// result is a page of what the caller may read.
type result struct {
	entries []history.Entry
	next    *history.Cursor
}

// fetch returns a page of q that c may read, newest first: what c may
// read is decided before the store reads an entry (decider.access), the
// page's payloads are bounded by Options.MaxResponseBytes and reserved in
// budget before they are read, and the store goes through at most its
// scan window of entries, matching or not, ending the page with a cursor
// there. A CRD change's objects hit and the actor details are then
// filtered for c.
func (s *Server) fetch(ctx context.Context, c *caller, q history.Query, budget *reservation) (result, error) {
	d := s.decider(c, &q)
	access, err := d.access(ctx, s.store)
	if err != nil {
		return result{}, err
	}
	if access != nil && len(access.Resources) == 0 && len(access.Checked) == 0 {
		return result{}, nil // nothing the caller may read: the store is not asked
	}
	q.Access, q.MaxBytes, q.Reserve = access, s.maxResponseBytes, budget.take
	page, err := s.store.Query(ctx, q)
	s.scanned.Add(float64(page.Scanned))
	switch {
	case errors.Is(err, history.ErrBusy):
		return result{}, &throttledError{"memory", fmt.Sprintf("the history's responses being built hold %d bytes, their bound (--history-max-bytes-in-flight): try again in a second",
			s.budget.max)}
	case err != nil:
		return result{}, err
	case d.throttled && len(page.Entries) == 0:
		return result{}, s.auth.reviews.refused()
	}
	for i := range page.Entries {
		e := &page.Entries[i]
		if e.Omitted > 0 {
			e.Payload = headPayload(e)
		}
		if err := d.filter(ctx, e); err != nil {
			return result{}, err
		}
	}
	return result{entries: page.Entries, next: page.Next}, nil
}

// headPayload is what stands for the payload of an entry left out of a
// page (history.Entry.Omitted): the keys of the payload that the store
// keeps beside it, in the payload's order (docs/payload.md).
func headPayload(e *history.Entry) []byte {
	p := struct {
		ID       string `json:"id"`
		Time     string `json:"time"`
		Rule     string `json:"rule"`
		Type     string `json:"type"`
		Resource struct {
			Group    string `json:"group"`
			Resource string `json:"resource"`
		} `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		UID       string `json:"uid"`
		Actor     *struct {
			User             *apiUser `json:"user,omitempty"`
			ImpersonatedUser *apiUser `json:"impersonatedUser,omitempty"`
		} `json:"actor,omitempty"`
	}{ID: e.ID, Time: e.Time.UTC().Format(time.RFC3339Nano), Rule: e.Rule, Type: string(e.Type), Namespace: e.Namespace, Name: e.Name, UID: e.UID}
	p.Resource.Group, p.Resource.Resource = e.Group, e.Resource
	if e.User != "" || e.Impersonated != "" {
		p.Actor = &struct {
			User             *apiUser `json:"user,omitempty"`
			ImpersonatedUser *apiUser `json:"impersonatedUser,omitempty"`
		}{}
		if e.User != "" {
			p.Actor.User = &apiUser{e.User}
		}
		if e.Impersonated != "" {
			p.Actor.ImpersonatedUser = &apiUser{e.Impersonated}
		}
	}
	b, _ := marshalNoEscape(p) // strings always marshal
	return bytes.TrimSuffix(b, []byte("\n"))
}

type apiUser struct {
	Username string `json:"username"`
}

// parseQuery reads the query of raw (a URL's raw query): refused when it
// does not parse (a ";", a bad "%" escape: url.Values would drop that
// pair, and a filter with it), then validated by history.ParseQuery; the
// cursor is one this server sealed.
func (s *Server) parseQuery(raw string) (history.Query, error) {
	v, err := rawValues(raw)
	if err != nil {
		return history.Query{}, err
	}
	return s.parseValues(v)
}

// rawValues returns the parameters of raw, a URL's raw query, or an
// error when it does not parse.
func rawValues(raw string) (url.Values, error) {
	v, err := url.ParseQuery(raw)
	if err != nil {
		return nil, badRequest{fmt.Errorf("the query string does not parse (%w): separate parameters with & and escape %%, & and ; in values as %%25, %%26 and %%3B", err)}
	}
	return v, nil
}

// parseValues reads a query from v: see parseQuery.
func (s *Server) parseValues(v url.Values) (history.Query, error) {
	cursor, hasCursor := v["cursor"]
	if hasCursor {
		v = cloneValues(v)
		delete(v, "cursor")
	}
	q, err := history.ParseQuery(v, s.now())
	if err != nil {
		return history.Query{}, badRequest{err}
	}
	if hasCursor {
		if len(cursor) != 1 {
			return history.Query{}, badRequest{fmt.Errorf("parameter \"cursor\" given %d times: give it once", len(cursor))}
		}
		c, err := s.cursors.open(cursor[0])
		if err != nil {
			return history.Query{}, badRequest{fmt.Errorf("parameter \"cursor\": %w", err)}
		}
		q.After = &c
	}
	return q, nil
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = vs
	}
	return out
}

// budget bounds the payload bytes of the responses being built.
type budget struct {
	max  int64
	used atomic.Int64
}

// reservation is what one request holds of the budget.
type reservation struct {
	b    *budget
	held int64
}

// take reserves n more bytes, or reports false when the budget has not
// that many left.
func (r *reservation) take(n int64) bool {
	if r.b.used.Add(n) > r.b.max {
		r.b.used.Add(-n)
		return false
	}
	r.held += n
	return true
}

// release gives back what r holds, once its response is written.
func (r *reservation) release() {
	r.b.used.Add(-r.held)
	r.held = 0
}
