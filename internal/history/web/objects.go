package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/history"
)

// ObjectsPath is the prefix of the API of objects as they were:
// ObjectsPath + "RESOURCE[.GROUP]/NAMESPACE/NAME" (or ".../NAME" for a
// cluster-scoped object) with ?at=TIME for the object at a time, or
// ?from=T1&to=T2 for what changed between two times. A caller may read it
// when it may get the object (SubjectAccessReview of get on the resource,
// in the namespace, with the name), as for the entries of the object.
const ObjectsPath = "/api/v1/history/objects/"

// APIChange is a recorded change of an object (history.State) as the
// objects API writes it.
type APIChange struct {
	Time string      `json:"time"`
	Type change.Type `json:"type"`
	// Baseline marks the state fieldwatch found the object in, which is
	// no change.
	Baseline        bool   `json:"baseline,omitempty"`
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
	// User, ImpersonatedUser and Manager are who made it, when known.
	User             string `json:"user,omitempty"`
	ImpersonatedUser string `json:"impersonatedUser,omitempty"`
	Manager          string `json:"manager,omitempty"`
	// Changes are an update's RFC 6902 operations with oldValue, redacted
	// as the object is; only in a diff's list.
	Changes json.RawMessage `json:"changes,omitempty"`
}

// APIObject is the answer of ?at=: the object as it was then.
type APIObject struct {
	At string `json:"at"`
	// Object is the object (redacted values "<redacted>", no
	// managedFields); null when it was deleted then.
	Object json.RawMessage `json:"object"`
	// Last is the last change at or before At: who made the object what
	// it was (for a deleted one, its deletion).
	Last APIChange `json:"last"`
	// Since is the time of the whole state the rebuild started from, and
	// Applied how many changes it applied to it.
	Since   string `json:"since"`
	Applied int    `json:"applied"`
}

// APIDiff is the answer of ?from=&to=.
type APIDiff struct {
	From APIObject `json:"from"`
	To   APIObject `json:"to"`
	// Changes are those after From.At up to To.At, oldest first, at
	// most history.MaxDiffChanges; More says there were more.
	Changes []APIChange `json:"changes"`
	More    bool        `json:"more,omitempty"`
}

// ChangeOf is s as the API writes it.
func ChangeOf(s *history.State) APIChange {
	c := APIChange{Time: s.Time.UTC().Format(time.RFC3339Nano), Type: s.Type, Baseline: s.Baseline, UID: s.UID, ResourceVersion: s.ResourceVersion,
		User: s.User, ImpersonatedUser: s.Impersonated, Manager: s.Manager}
	if len(s.Ops) > 0 {
		c.Changes = json.RawMessage(s.Ops)
	}
	return c
}

// ObjectOf is r, rebuilt at at, as the API writes it.
func ObjectOf(r *history.Rebuilt, at time.Time) APIObject {
	o := APIObject{At: at.UTC().Format(time.RFC3339Nano), Object: json.RawMessage("null"), Last: ChangeOf(&r.Last),
		Since: r.From.Time.UTC().Format(time.RFC3339Nano), Applied: r.Applied}
	if r.Object != nil {
		o.Object = json.RawMessage(r.Object)
	}
	return o
}

// DiffOf is d, between from and to, as the API writes it.
func DiffOf(d *history.Diff, from, to time.Time) APIDiff {
	out := APIDiff{From: ObjectOf(&d.From, from), To: ObjectOf(&d.To, to), Changes: make([]APIChange, len(d.Changes)), More: d.More}
	for i := range d.Changes {
		out.Changes[i] = ChangeOf(&d.Changes[i])
	}
	return out
}

// forbidden is a request for an object its caller may not get.
type forbidden struct{ error }

func (e forbidden) Unwrap() error { return e.error }

// objects serves ObjectsPath.
func (s *Server) objects(w http.ResponseWriter, r *http.Request) {
	const handler = "objects"
	ctx, cancel, c, ok := s.beginJSON(w, r, handler)
	defer cancel()
	if !ok {
		return
	}
	body, err := s.objectAnswer(ctx, c, r)
	if err != nil {
		s.jsonError(w, handler, err)
		return
	}
	held := &reservation{b: s.budget}
	defer held.release()
	if int64(len(body)) > s.maxResponseBytes {
		s.jsonError(w, handler, badRequest{fmt.Errorf("the answer holds %d bytes, more than a response may (--history-max-response-bytes %d): narrow the range", len(body), s.maxResponseBytes)})
		return
	}
	if !held.take(int64(len(body))) {
		s.jsonError(w, handler, &throttledError{"memory", fmt.Sprintf("the history's responses being built hold %d bytes, their bound (--history-max-bytes-in-flight): try again in a second", s.budget.max)})
		return
	}
	s.headers(w, "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	s.requests.WithLabelValues(handler, "200").Inc()
}

// objectAnswer decides whether c may get the object r names, before the
// store is read, then rebuilds it (at=) or diffs it (from=, to=).
func (s *Server) objectAnswer(ctx context.Context, c *caller, r *http.Request) ([]byte, error) {
	key, err := objectKeyOf(strings.TrimPrefix(r.URL.Path, ObjectsPath))
	if err != nil {
		return nil, badRequest{err}
	}
	v, err := rawValues(r.URL.RawQuery)
	if err != nil {
		return nil, err
	}
	for name := range v {
		if name != "at" && name != "from" && name != "to" {
			return nil, badRequest{fmt.Errorf("parameter %q: the objects API takes at, or from and to", name)}
		}
	}
	q, err := s.objectQueryOf(key, v)
	if err != nil {
		return nil, err
	}
	o, d, err := s.objectStates(ctx, c, q)
	if err != nil {
		return nil, err
	}
	if o != nil {
		return marshalNoEscape(o)
	}
	return marshalNoEscape(d)
}

// objectQuery asks for an object at a time, or between two.
type objectQuery struct {
	key          history.ObjectKey
	at, from, to time.Time // at zero: between from and to
}

// objectQueryOf reads the times of v: at, or from and to, each once.
func (s *Server) objectQueryOf(key history.ObjectKey, v url.Values) (objectQuery, error) {
	now := s.now()
	times := map[string]time.Time{}
	for _, name := range []string{"at", "from", "to"} {
		vs, ok := v[name]
		if !ok {
			continue
		}
		if len(vs) != 1 {
			return objectQuery{}, badRequest{fmt.Errorf("parameter %q given %d times: give it once", name, len(vs))}
		}
		t, err := history.ParseStateTime(vs[0], now)
		if err != nil {
			return objectQuery{}, badRequest{fmt.Errorf("parameter %q: %w", name, err)}
		}
		times[name] = t
	}
	_, at := times["at"]
	_, from := times["from"]
	_, to := times["to"]
	if at == (from || to) || from != to {
		return objectQuery{}, badRequest{errors.New("give at=TIME for the object at a time, or from=T1&to=T2 for what changed between")}
	}
	if from && !times["from"].Before(times["to"]) {
		return objectQuery{}, badRequest{errors.New("from must be before to")}
	}
	return objectQuery{key: key, at: times["at"], from: times["from"], to: times["to"]}, nil
}

// objectStates decides whether c may get q's object, before the store is
// read, then returns it at q.at, or the diff between q.from and q.to.
func (s *Server) objectStates(ctx context.Context, c *caller, q objectQuery) (*APIObject, *APIDiff, error) {
	key := q.key
	ok, err := s.auth.allowed(ctx, c, getVerb, history.GroupResource{Group: key.Group, Resource: key.Resource}, key.Namespace, key.Name)
	switch {
	case err != nil:
		return nil, nil, err
	case !ok:
		return nil, nil, forbidden{fmt.Errorf("%s may not get %s: the history shows an object's states to whom may get it", c.name(), key)}
	}
	if !q.at.IsZero() {
		rb, err := history.Rebuild(ctx, s.store, key, q.at)
		if err != nil {
			return nil, nil, stateError(err)
		}
		o := ObjectOf(&rb, q.at)
		return &o, nil, nil
	}
	d, err := history.DiffStates(ctx, s.store, key, q.from, q.to)
	if err != nil {
		return nil, nil, stateError(err)
	}
	out := DiffOf(&d, q.from, q.to)
	return nil, &out, nil
}

// stateError marks the errors of a rebuild that are the caller's input:
// an object with no states, a time before them.
func stateError(err error) error {
	if errors.Is(err, history.ErrNoStates) || errors.Is(err, history.ErrBeforeStates) || errors.Is(err, history.ErrNotStates) {
		return badRequest{err}
	}
	return err
}

// objectKeyOf reads RESOURCE[.GROUP]/NAMESPACE/NAME or
// RESOURCE[.GROUP]/NAME.
func objectKeyOf(path string) (history.ObjectKey, error) {
	parts := strings.Split(path, "/")
	switch len(parts) {
	case 2:
		return history.ParseObjectKey(parts[0], parts[1])
	case 3:
		return history.ParseObjectKey(parts[0], parts[1]+"/"+parts[2])
	}
	return history.ObjectKey{}, fmt.Errorf("path %q: want %sRESOURCE[.GROUP]/NAMESPACE/NAME or %sRESOURCE[.GROUP]/NAME",
		truncate(path), ObjectsPath, ObjectsPath)
}

// ObjectURL is the objects API's path and query for key at at, or
// between from and to when at is zero.
func ObjectURL(key history.ObjectKey, at, from, to time.Time) string {
	res := key.Resource
	if key.Group != "" {
		res += "." + key.Group
	}
	p := ObjectsPath + url.PathEscape(res) + "/"
	if key.Namespace != "" {
		p += url.PathEscape(key.Namespace) + "/"
	}
	p += url.PathEscape(key.Name)
	v := url.Values{}
	if !at.IsZero() {
		v.Set("at", at.UTC().Format(time.RFC3339Nano))
	} else {
		v.Set("from", from.UTC().Format(time.RFC3339Nano))
		v.Set("to", to.UTC().Format(time.RFC3339Nano))
	}
	return p + "?" + v.Encode()
}

// truncate shortens a value quoted in an error message.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
