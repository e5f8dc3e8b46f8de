package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/pmezard/go-difflib/difflib"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/internal/history"
)

// stateView is the object page's time control and what it shows: the
// object as it was at a time, or the diff between two times beside the
// changes and users between (ObjectsPath's answers, rendered).
type stateView struct {
	// UID is the object's, for the forms.
	UID string
	// At, From and To are the form's values as typed.
	At, From, To string
	// Error says why there is nothing to show (bad input, no states, not
	// allowed).
	Error string
	// Object is the object at At, as YAML; Last its last change.
	Object *stateObject
	// Diff is the object between From and To.
	Diff *stateDiff
}

type stateObject struct {
	At      string
	YAML    string
	Deleted bool
	Last    stateChange
}

type stateDiff struct {
	From, To stateObject
	Lines    []diffLine
	Changes  []stateChange
	More     bool
	// Schema is, for a CRD that existed at both times, its versions'
	// schemas as trees with what was added, removed, narrowed or
	// loosened between; SchemaError says why there is none for a CRD.
	Schema      *diff.SchemaTree
	SchemaError string
}

// diffLine is a line of a unified diff: Class is add, del, hunk or ctx.
type diffLine struct{ Class, Text string }

// stateChange is a recorded change, for the page.
type stateChange struct {
	Time, ISO, Type, ResourceVersion, Who string
	Baseline                              bool
	Ops                                   []string // op path, at most maxOps
	More                                  int
}

// maxOps is how many operations of a change the page lists.
const maxOps = 8

// stateViewOf reads the object page's time control from v (at, or from
// and to) and fills it for the object head names, as c may read it; nil
// when v asks nothing of it.
func (s *Server) stateViewOf(ctx context.Context, c *caller, head *entryView, v url.Values) *stateView {
	sv := &stateView{UID: head.UID, At: v.Get("at"), From: v.Get("from"), To: v.Get("to")}
	if sv.At == "" && sv.From == "" && sv.To == "" {
		return sv
	}
	times := url.Values{}
	for name, value := range map[string]string{"at": sv.At, "from": sv.From, "to": sv.To} {
		if value != "" {
			times.Set(name, value)
		}
	}
	key, err := history.ParseObjectKey(head.Resource, head.Namespace+"/"+head.Name)
	if head.Namespace == "" {
		key, err = history.ParseObjectKey(head.Resource, head.Name)
	}
	if err == nil {
		var q objectQuery
		if q, err = s.objectQueryOf(key, times); err == nil {
			var o *APIObject
			var d *APIDiff
			if o, d, err = s.objectStates(ctx, c, q); err == nil {
				err = sv.fill(key, o, d, s.maxResponseBytes)
			}
		}
	}
	if err != nil {
		_, sv.Error = s.status("object", err)
	}
	return sv
}

// fill renders o (or d) into sv, refusing what is larger than max bytes.
func (sv *stateView) fill(key history.ObjectKey, o *APIObject, d *APIDiff, max int64) error {
	if o != nil {
		so, err := stateObjectOf(o)
		if err != nil {
			return err
		}
		sv.Object = &so
		return sizeCheck(int64(len(so.YAML)), max)
	}
	from, err := stateObjectOf(&d.From)
	if err != nil {
		return err
	}
	to, err := stateObjectOf(&d.To)
	if err != nil {
		return err
	}
	text, err := UnifiedDiff(key, from.At, from.YAML, to.At, to.YAML)
	if err != nil {
		return err
	}
	sd := &stateDiff{From: from, To: to, More: d.More}
	for _, l := range difflib.SplitLines(text) {
		l = strings.TrimSuffix(l, "\n")
		class := "ctx"
		switch {
		case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"), strings.HasPrefix(l, "@@"):
			class = "hunk"
		case strings.HasPrefix(l, "+"):
			class = "add"
		case strings.HasPrefix(l, "-"):
			class = "del"
		}
		if l != "" {
			sd.Lines = append(sd.Lines, diffLine{class, l})
		}
	}
	for i := range d.Changes {
		sd.Changes = append(sd.Changes, stateChangeOf(&d.Changes[i]))
	}
	if key.Group == "apiextensions.k8s.io" && key.Resource == "customresourcedefinitions" && !from.Deleted && !to.Deleted {
		if sd.Schema, err = schemaTree(d.From.Object, d.To.Object); err != nil {
			sd.SchemaError = err.Error()
		}
	}
	sv.Diff = sd
	return sizeCheck(int64(len(text)+len(from.YAML)+len(to.YAML)), max)
}

// schemaTree is the tree of the schemas of two states of a CRD, with
// what crd-diff finds between them on its fields.
func schemaTree(from, to json.RawMessage) (*diff.SchemaTree, error) {
	var crds [2]*apiextensionsv1.CustomResourceDefinition
	for i, raw := range []json.RawMessage{from, to} {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("the CRD's schema cannot be read: %w", err)
		}
		crd, err := diff.FromMap(m)
		if err != nil {
			return nil, fmt.Errorf("the CRD's schema cannot be read: %w", err)
		}
		crds[i] = crd
	}
	return diff.Tree(crds[0], crds[1], diff.Compare(crds[0], crds[1])), nil
}

// UnifiedDiff is the unified diff, with three lines of context, of two
// YAML states of key at the times fromAt and toAt: as the object page
// and fieldwatch history diff show it.
func UnifiedDiff(key history.ObjectKey, fromAt, fromYAML, toAt, toYAML string) (string, error) {
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(fromYAML), B: difflib.SplitLines(toYAML),
		FromFile: key.String() + " at " + fromAt, ToFile: key.String() + " at " + toAt, Context: 3,
	})
}

// sizeCheck refuses a page larger than a response may be.
func sizeCheck(n, max int64) error {
	if n > max {
		return badRequest{errTooLarge}
	}
	return nil
}

var errTooLarge = errors.New("the object's states are larger than a response may hold (--history-max-response-bytes): read them with fieldwatch history show or diff")

func stateObjectOf(o *APIObject) (stateObject, error) {
	so := stateObject{At: o.At, Last: stateChangeOf(&o.Last)}
	if string(o.Object) == "null" {
		so.Deleted = true
		return so, nil
	}
	y, err := yaml.JSONToYAML(o.Object)
	if err != nil {
		return stateObject{}, err
	}
	so.YAML = string(y)
	return so, nil
}

func stateChangeOf(c *APIChange) stateChange {
	sc := stateChange{ISO: c.Time, Type: string(c.Type), ResourceVersion: c.ResourceVersion, Baseline: c.Baseline}
	if t, err := time.Parse(time.RFC3339Nano, c.Time); err == nil {
		sc.Time = t.UTC().Format("2006-01-02 15:04:05 MST")
	}
	switch {
	case c.ImpersonatedUser != "":
		sc.Who = c.ImpersonatedUser + " (impersonated by " + c.User + ")"
	case c.User != "":
		sc.Who = c.User
	case c.Manager != "":
		sc.Who = "field manager " + c.Manager
	}
	var ops []struct{ Op, Path string }
	if len(c.Changes) > 0 && json.Unmarshal(c.Changes, &ops) == nil {
		for i, o := range ops {
			if i == maxOps {
				sc.More = len(ops) - maxOps
				break
			}
			sc.Ops = append(sc.Ops, o.Op+" "+o.Path)
		}
	}
	return sc
}
