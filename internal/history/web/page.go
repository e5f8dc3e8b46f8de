package web

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/history"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{"plural": plural}).ParseFS(templateFS, "templates/*.html"))

// objectLimit is how many entries of one object a page shows.
const objectLimit = 50

// pageData is what the templates render.
type pageData struct {
	Title  string
	Caller string
	Error  string
	Form   url.Values // the filters as typed
	Types  []string
	// Clusters are the clusters the history holds entries of, when more
	// than one (or one is filtered on): the page has a cluster filter
	// and column then.
	Clusters []string
	Filters  string // the filters, described
	Entries  []entryView
	// Gaps are the trail's gap records written within the page's span.
	Gaps []gapView
	// Newest and Older link the first and the next page ("" when none).
	Newest, Older string
	// Object heads one object's page; State is its time control.
	Object *entryView
	State  *stateView
	// Mark says whether the trail's last verification covered the
	// timeline's entries (nil: no verifier); Trail is the summary page's.
	Mark  *markView
	Trail *trailView
}

// gapView is a gap record on the timeline: payloads the history did not
// keep. Its ids are not shown: they may be of objects the caller may not
// read.
type gapView struct {
	Time, ISO, From, To, Reasons string
	Count                        int
}

// maxGaps is how many gap records a page of the timeline shows.
const maxGaps = 20

// gapsOf returns the gap records written within a page of the timeline:
// from its oldest entry's time (the beginning on the last page) to its
// newest's (now on the first page). Whatever the filters: a gap may be
// of entries they would select.
func (s *Server) gapsOf(ctx context.Context, q *history.Query, res result) []gapView {
	gl, ok := s.store.(history.GapLister)
	if !ok {
		return nil
	}
	from, until := history.MinTime, history.MaxTime
	if n := len(res.entries); n > 0 {
		if q.After != nil {
			until = res.entries[0].Time
		}
		if res.next != nil {
			from = res.entries[n-1].Time
		}
	}
	gs, err := gl.GapsBetween(ctx, from, until, maxGaps)
	if err != nil {
		s.errLog.Do(func() { s.log.Error("history: the trail's gap records could not be read", "error", err) })
		return nil
	}
	out := make([]gapView, len(gs))
	for i, g := range gs {
		reasons := make([]string, 0, len(g.Gap.Reasons))
		for r, n := range g.Gap.Reasons {
			reasons = append(reasons, fmt.Sprintf("%s: %d", r, n))
		}
		sort.Strings(reasons)
		out[i] = gapView{Time: g.At.Format("2006-01-02 15:04:05 MST"), ISO: g.At.Format(time.RFC3339Nano), Count: int(g.Gap.Count),
			From: g.Gap.From.UTC().Format(time.RFC3339), To: g.Gap.To.UTC().Format(time.RFC3339), Reasons: strings.Join(reasons, ", ")}
	}
	return out
}

// clustersOf returns the clusters the timeline offers to filter on: the
// store's, when there is more than one or filtered is one; nil otherwise
// (one cluster, or none named: no column). Cluster names are shown to
// every caller of the page: they name the instances writing into the
// store, not what any entry holds.
func (s *Server) clustersOf(ctx context.Context, filtered string) []string {
	cs, err := s.store.Clusters(ctx)
	if err != nil {
		s.errLog.Do(func() { s.log.Error("history: the clusters could not be read", "error", err) })
		return nil
	}
	if filtered != "" && !slices.Contains(cs, filtered) {
		cs = append(cs, filtered)
		slices.Sort(cs)
	}
	if len(cs) < 2 && filtered == "" {
		return nil
	}
	return cs
}

// timeline serves /history: the newest entries, filtered like the API.
func (s *Server) timeline(w http.ResponseWriter, r *http.Request) {
	const handler = "timeline"
	if r.URL.Path != "/history" {
		http.NotFound(w, r)
		return
	}
	if !s.methodOK(w, r, handler) {
		return
	}
	data := pageData{Title: "History", Form: url.Values{}, Types: []string{"created", "updated", "deleted"}}
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	c, err := s.auth.authenticate(r)
	if err != nil {
		s.page(w, handler, "timeline", data, err)
		return
	}
	data.Caller = c.name()
	raw, err := rawValues(r.URL.RawQuery)
	if err != nil {
		s.page(w, handler, "timeline", data, err)
		return
	}
	// The form sends every field: an empty one is no filter.
	for k, vs := range raw {
		if len(vs) != 1 || vs[0] != "" {
			data.Form[k] = vs
		}
	}
	q, err := s.parseValues(data.Form)
	if err != nil {
		s.page(w, handler, "timeline", data, err)
		return
	}
	held := &reservation{b: s.budget}
	defer held.release()
	res, err := s.fetch(ctx, c, q, held)
	if err != nil {
		s.page(w, handler, "timeline", data, err)
		return
	}
	data.Filters = describe(&q)
	data.Clusters = s.clustersOf(ctx, q.Cluster)
	for i := range res.entries {
		data.Entries = append(data.Entries, viewOf(&res.entries[i], true))
	}
	if len(res.entries) > 0 {
		data.Mark = s.markOf(res.entries, data.Entries)
	}
	data.Gaps = s.gapsOf(ctx, &q, res)
	data.Newest, data.Older = s.pager("/history", data.Form, res.next)
	s.page(w, handler, "timeline", data, nil)
}

// object serves /history/object?uid=UID: one object's history, each
// change with its old and new values and who made it, and its time
// control: with at=TIME the object as it was then, with from=T1&to=T2
// the diff between beside the changes and users between (stateView).
func (s *Server) object(w http.ResponseWriter, r *http.Request) {
	const handler = "object"
	if !s.methodOK(w, r, handler) {
		return
	}
	data := pageData{Title: "Object history", Form: url.Values{}}
	ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
	defer cancel()
	c, err := s.auth.authenticate(r)
	if err != nil {
		s.page(w, handler, "object", data, err)
		return
	}
	data.Caller = c.name()
	v, err := rawValues(r.URL.RawQuery)
	if err != nil {
		s.page(w, handler, "object", data, err)
		return
	}
	times := url.Values{}
	for k, vs := range v {
		switch k {
		case "uid", "cursor":
		case "at", "from", "to":
			times[k] = vs
			delete(v, k)
		default:
			s.page(w, handler, "object", data, badRequest{errors.New("parameter " + strconv.Quote(k) + ": this page takes uid, cursor, at, from and to only")})
			return
		}
	}
	if v.Get("uid") == "" {
		s.page(w, handler, "object", data, badRequest{errors.New("parameter \"uid\" is required: the object's uid")})
		return
	}
	v.Set("limit", strconv.Itoa(objectLimit))
	q, err := s.parseValues(v)
	if err != nil {
		s.page(w, handler, "object", data, err)
		return
	}
	held := &reservation{b: s.budget}
	defer held.release()
	res, err := s.fetch(ctx, c, q, held)
	if err != nil {
		s.page(w, handler, "object", data, err)
		return
	}
	for i := range res.entries {
		data.Entries = append(data.Entries, viewOf(&res.entries[i], false))
	}
	if len(data.Entries) > 0 {
		head := data.Entries[0]
		data.Object = &head
		data.Title = head.Kind + " " + head.Object
		data.State = s.stateViewOf(ctx, c, &head, times)
	}
	data.Newest, data.Older = s.pager("/history/object", url.Values{"uid": {q.UID}}, res.next)
	s.page(w, handler, "object", data, nil)
}

// pager returns the links to the first page of form's filters and to the
// page after next ("" when there is none).
func (s *Server) pager(path string, form url.Values, next *history.Cursor) (newest, older string) {
	base := url.Values{}
	for k, vs := range form {
		if k != "cursor" {
			base[k] = vs
		}
	}
	newest = path
	if len(base) > 0 {
		newest += "?" + base.Encode()
	}
	if next != nil {
		base.Set("cursor", s.cursors.seal(*next))
		older = path + "?" + base.Encode()
	}
	return newest, older
}

// page renders a page, or the error page of err with its status.
func (s *Server) page(w http.ResponseWriter, handler, name string, data pageData, err error) {
	code := http.StatusOK
	if err != nil {
		code, data.Error = s.status(handler, err)
		data.Entries = nil
	}
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		s.log.Error("rendering a history page", "page", name, "error", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		s.requests.WithLabelValues(handler, "500").Inc()
		return
	}
	s.headers(w, "text/html; charset=utf-8")
	// A browser asks for Basic credentials: the password is the token.
	s.challenge(w, code, `Basic realm="fieldwatch history: any user name, a token as the password", charset="UTF-8"`)
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
	s.requests.WithLabelValues(handler, strconv.Itoa(code)).Inc()
}

// assets serves the embedded stylesheet and script.
func (s *Server) assets() http.Handler {
	sub, _ := fs.Sub(assetFS, "assets")
	files := http.StripPrefix("/history/assets/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "max-age=3600")
		files.ServeHTTP(w, r)
	})
}
