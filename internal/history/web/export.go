package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/history"
)

// exportWriteWindow is how long one write of an export may take: the
// server's write deadline is moved by as much before each, so that an
// export lasts as long as it writes, and a reader that stops reading is
// let go.
const exportWriteWindow = 30 * time.Second

// errExportForbidden refuses an export to a caller that may not read
// everything it holds.
var errExportForbidden = errors.New("the export holds every entry of the history: it needs list on every resource (*/*) in every namespace")

// errExportBusy refuses an export while another one is under way.
var errExportBusy = &throttledError{reason: "export", msg: "another export is under way: try again when it is done"}

// export serves /api/v1/history/export: the trail as history.Export
// writes it (JSON Lines), to a caller allowed to list every resource
// everywhere, one export at a time.
func (s *Server) export(w http.ResponseWriter, r *http.Request) {
	const handler = "export"
	if !s.methodOK(w, r, handler) {
		return
	}
	c, err := s.auth.authenticate(r)
	if err != nil {
		s.jsonError(w, handler, err)
		return
	}
	trail, ok := s.store.(history.Trail)
	if !ok {
		s.jsonError(w, handler, errors.New("the history keeps no trail"))
		return
	}
	if !c.all {
		ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
		ok, err := s.auth.allowed(ctx, c, listVerb, everything, "", "")
		cancel()
		if err != nil {
			s.jsonError(w, handler, err)
			return
		}
		if !ok {
			s.forbidden(w, handler, errExportForbidden)
			return
		}
	}
	select {
	case s.exporting <- struct{}{}:
		defer func() { <-s.exporting }()
	default:
		s.jsonError(w, handler, errExportBusy)
		return
	}
	s.headers(w, "application/x-ndjson")
	w.Header().Set("Content-Disposition", `attachment; filename="fieldwatch-trail.jsonl"`)
	w.WriteHeader(http.StatusOK)
	s.requests.WithLabelValues(handler, "200").Inc()
	if r.Method == http.MethodHead {
		return
	}
	rc := http.NewResponseController(w)
	if err := history.Export(r.Context(), trail, &deadlineWriter{w: w, rc: rc}, s.now()); err != nil && r.Context().Err() == nil {
		// The status is sent: the export ends short, which verify reports
		// (a line cut, or a cut tail).
		s.errLog.Do(func() { s.log.Error("history export failed; the response ends short", "error", err) })
	}
}

// deadlineWriter moves the write deadline before each write.
type deadlineWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(exportWriteWindow)) // not every ResponseWriter has deadlines
	return d.w.Write(p)
}

// forbidden answers 403 with err.
func (s *Server) forbidden(w http.ResponseWriter, handler string, err error) {
	body := fmt.Appendf(nil, "{\"error\":%q}\n", err.Error())
	s.headers(w, "application/json")
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write(body)
	s.requests.WithLabelValues(handler, "403").Inc()
}
