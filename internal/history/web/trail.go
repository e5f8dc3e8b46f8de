package web

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/history"
)

// markView is the timeline's mark of a page of entries: whether the last
// verification of the trail in place covered them and found them intact.
type markView struct {
	// State is verified, partial (some entries came after the
	// verification), problems, failed or pending.
	State string
	Text  string
	// Time and ISO are the verification's (when there was one).
	Time, ISO string
}

// maxSummaryProblems is how many problems the summary lists.
const maxSummaryProblems = 50

// markOf returns the mark of a page's entries (nil without a verifier),
// and marks the entries the verification found a problem with.
func (s *Server) markOf(entries []history.Entry, views []entryView) *markView {
	if s.verification == nil {
		return nil
	}
	v := s.verification()
	switch {
	case v == nil:
		return &markView{State: "pending", Text: "Not verified yet: the trail's first verification has not finished."}
	case v.Err != nil:
		return &markView{State: "failed", Time: v.Started.UTC().Format(timeFormat), ISO: v.Started.UTC().Format(time.RFC3339Nano),
			Text: "Not verified: the last verification could not read the trail."}
	}
	m := &markView{Time: v.Started.UTC().Format(timeFormat), ISO: v.Started.UTC().Format(time.RFC3339Nano)}
	onPage, newer := 0, 0
	for i := range entries {
		if kind, ok := v.Problem(entries[i].Seq); ok {
			views[i].Problem = string(kind)
			onPage++
		}
		if !entries[i].Recorded.Before(v.Covered) {
			newer++
		}
	}
	signed := "; its checkpoints' signatures checked"
	if !v.Report.Signed {
		signed = "; no signing key, so a cut tail cannot be told"
	}
	switch n := len(v.Report.Problems); {
	case n > 0:
		m.State = "problems"
		m.Text = fmt.Sprintf("Not verified: the verification found %d %s in the trail", n, plural(n, "problem", "problems"))
		if onPage > 0 {
			m.Text += fmt.Sprintf(", %d of them with entries on this page (marked)", onPage)
		}
		m.Text += "."
	case newer == len(entries) && newer > 0:
		m.State = "partial"
		m.Text = "Not verified yet: every entry here was recorded after the last verification, which found the trail intact" + signed + "."
	case newer > 0:
		m.State = "partial"
		m.Text = fmt.Sprintf("%d of %d entries here were recorded after the last verification, so are not verified yet; the others were in the trail intact%s.",
			newer, len(entries), signed)
	default:
		m.State = "verified"
		m.Text = "Verified: every entry here was in the trail intact" + signed + "."
	}
	return m
}

// plural is one for n == 1, else many (the templates' plural too).
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// trailView is the summary of the last verification of the trail.
type trailView struct {
	V *history.Verification
	// Time, Covered and Duration are the verification's start, what it
	// covered and how long the walk took.
	Time, Covered, Duration string
	// Detailed: the caller may read every entry, so sees the chains and
	// the problems; others see the counts only.
	Detailed bool
	Problems []history.Problem
	More     int // problems not listed
}

// trailSummary serves /history/trail: the last verification of the trail
// in place. The chains' names and the problems (which name entries'
// ids) are shown to callers who may list every resource everywhere, as
// the export is; others see whether it was intact and the counts.
func (s *Server) trailSummary(w http.ResponseWriter, r *http.Request) {
	const handler = "trail"
	if !s.methodOK(w, r, handler) {
		return
	}
	data := pageData{Title: "Audit trail", Trail: &trailView{}}
	c, err := s.auth.authenticate(r)
	if err != nil {
		s.page(w, handler, "trail", data, err)
		return
	}
	data.Caller = c.name()
	if s.verification == nil {
		s.page(w, handler, "trail", data, badRequest{fmt.Errorf("this fieldwatch does not verify its trail (--history-verify-interval 0)")})
		return
	}
	tv := data.Trail
	tv.V = s.verification()
	tv.Detailed = c.all
	if !c.all {
		ctx, cancel := context.WithTimeout(r.Context(), s.timeout)
		tv.Detailed, err = s.auth.allowed(ctx, c, listVerb, everything, "", "")
		cancel()
		if err != nil {
			s.page(w, handler, "trail", data, err)
			return
		}
	}
	if v := tv.V; v != nil {
		tv.Time, tv.Covered = v.Started.UTC().Format(timeFormat), v.Covered.UTC().Format(timeFormat)
		tv.Duration = v.Finished.Sub(v.Started).Round(time.Millisecond).String()
		if v.Report != nil && tv.Detailed {
			tv.Problems = v.Report.Problems[:min(len(v.Report.Problems), maxSummaryProblems)]
			tv.More = len(v.Report.Problems) - len(tv.Problems)
		}
	}
	s.page(w, handler, "trail", data, nil)
}
