package crdguard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubeversion "k8s.io/apimachinery/pkg/version"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/crd/impact"
)

// maxObjectsFlag names the bound on the objects read, as users set it.
const maxObjectsFlag = "--crd-impact-max-objects"

// everyObject are the breaking checks that strand every object of the
// CRD: its identity or every manifest of it changes.
var everyObject = map[string]bool{"scope-changed": true, "kind-changed": true}

// writerChecks are the breaking checks that strand the objects some client
// writes in a way the change ends, as their managedFields tell: at a
// version no longer served, or through a subresource removed.
var writerChecks = map[string]string{
	"served-version-removed":     "",
	"status-subresource-removed": "status",
	"scale-subresource-removed":  "scale",
}

// reviewUpdate reviews an UPDATE of a CRD or of its status.
func (g *Guard) reviewUpdate(ctx context.Context, req *admissionv1.AdmissionRequest, p *progress) *Decision {
	p.at("reading the CRDs")
	if req.SubResource == "status" {
		// The status subresource changes status only, and of status the
		// guard checks storedVersions: the apiextensions controllers'
		// condition updates are answered without decoding the schemas.
		if o, n, err := storedVersionsOf(req); err == nil && !narrowed(o, n) {
			return allow()
		}
	}
	old, err := decodeCRD(req.OldObject.Raw)
	if err != nil {
		return g.conclude(req, nil, verdict{incomplete: "cannot read the stored CRD: " + err.Error()})
	}
	new, err := decodeCRD(req.Object.Raw)
	if err != nil {
		return g.conclude(req, nil, verdict{incomplete: "cannot read the new CRD: " + err.Error()})
	}
	if equality.Semantic.DeepEqual(old.Spec, new.Spec) && !narrowed(old.Status.StoredVersions, new.Status.StoredVersions) {
		return allow() // metadata or conditions
	}
	p.at("comparing the CRDs")
	res := diff.CompareWith(old, new, g.policy)
	unmigrated := NewUnmigrated(old, new, g.classifier(old))
	if res.Breaking == 0 && unmigrated == nil {
		return allow()
	}

	ps := newPass(ctx, g.max, p)
	ps.unmigrated, ps.group = unmigrated, new.Spec.Group
	var need Need
	if res.Breaking > 0 {
		need |= Whole
		ps.scan = newScanPool(ctx, new, res, g.workers)
	}
	for _, c := range res.Checks {
		if sub, ok := writerChecks[c.Check]; ok && c.Severity != diff.Safe && c.Version != "" {
			if ps.written == nil {
				ps.written = map[writes]*tally{}
			}
			ps.written[writes{version: c.Version, sub: sub}] = &tally{}
			need |= Writers
		}
	}
	p.at("reading the objects")
	origin, err := g.source.Objects(ctx, listResource(old, new), need, ps.add)
	g.metrics.objects.WithLabelValues(origin).Add(float64(ps.read))
	incomplete := ps.incomplete(err, maxObjectsFlag)
	if err != nil {
		g.metrics.incomplete.WithLabelValues(reason(err)).Inc()
	}
	if ps.scan != nil {
		p.at("checking the objects against the new CRD")
		scanErr := ps.scan.finish()
		switch checked := int(ps.scan.scanned.Load()); {
		case scanErr != nil:
			incomplete = join(incomplete, fmt.Sprintf("objects not checked: %v", scanErr))
		case checked < ps.read && err == nil:
			incomplete = join(incomplete, fmt.Sprintf("out of time after checking %s of %s", number(checked), objectsOf(ps.read, "")))
		}
	}
	unmigrated.Record(res, g.policy)
	v := g.updateVerdict(res, new, ps)
	v.incomplete = incomplete
	if incomplete != "" {
		g.log.Info("a CRD review could not check every object", "name", req.Name, "why", incomplete, "origin", origin)
	}
	return g.conclude(req, new, v)
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// classifier tells where the objects of crd are stored.
func (g *Guard) classifier(crd *apiextensionsv1.CustomResourceDefinition) *Classifier {
	if g.ledger != nil {
		return g.ledger.Classifier(crd)
	}
	return NewClassifier(crd, g.clock.Now(), DefaultSettle)
}

// decodeCRD decodes a CRD of an admission request.
func decodeCRD(raw []byte) (*apiextensionsv1.CustomResourceDefinition, error) {
	if len(raw) == 0 {
		return nil, errors.New("the request carries none")
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := json.Unmarshal(raw, crd); err != nil {
		return nil, err
	}
	if crd.Kind != "" && crd.Kind != "CustomResourceDefinition" {
		return nil, fmt.Errorf("kind %q, not CustomResourceDefinition", crd.Kind)
	}
	return crd, nil
}

// storedVersionsOf reads status.storedVersions of the old and new CRD of
// req, decoding nothing else.
func storedVersionsOf(req *admissionv1.AdmissionRequest) (old, new []string, err error) {
	var o, n struct {
		Status struct {
			StoredVersions []string `json:"storedVersions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(req.OldObject.Raw, &o); err != nil {
		return nil, nil, err
	}
	if err := json.Unmarshal(req.Object.Raw, &n); err != nil {
		return nil, nil, err
	}
	return o.Status.StoredVersions, n.Status.StoredVersions, nil
}

// narrowed reports whether a version of old is missing from new, a
// status.storedVersions that is set.
func narrowed(old, new []string) bool {
	if len(new) == 0 {
		return false
	}
	for _, v := range old {
		if !slices.Contains(new, v) {
			return true
		}
	}
	return false
}

// listResource is the resource to list the objects at: the version the
// new CRD prefers among those both serve, else the one the old CRD (the
// one the apiserver serves now) prefers.
func listResource(old, new *apiextensionsv1.CustomResourceDefinition) schema.GroupVersionResource {
	gvr := schema.GroupVersionResource{Group: old.Spec.Group, Resource: old.Spec.Names.Plural}
	served := func(crd *apiextensionsv1.CustomResourceDefinition, name string) bool {
		return slices.ContainsFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == name && v.Served })
	}
	pick := func(crd *apiextensionsv1.CustomResourceDefinition, ok func(string) bool) string {
		best := ""
		for _, v := range crd.Spec.Versions {
			if v.Served && ok(v.Name) && (best == "" || kubeversion.CompareKubeAwareVersionStrings(v.Name, best) > 0) {
				best = v.Name
			}
		}
		return best
	}
	gvr.Version = pick(new, func(name string) bool { return served(old, name) })
	if gvr.Version == "" {
		gvr.Version = pick(old, func(string) bool { return true })
	}
	if gvr.Version == "" {
		gvr.Version = storageVersion(old)
	}
	return gvr
}

// finding is one breaking or unknown check with the objects it strands.
type finding struct {
	check   diff.Check
	n       int
	effect  string
	samples []string
	every   bool
	// stored, for a stored-version check, are the objects at its version.
	stored *stranded
}

// updateVerdict turns a comparison with its impact into warnings and, for
// deny mode, what to refuse.
func (g *Guard) updateVerdict(res *diff.Result, new *apiextensionsv1.CustomResourceDefinition, ps *pass) verdict {
	used := make([]bool, len(res.Impact))
	var v verdict
	refused, unknown := 0, 0
	for _, c := range res.Checks {
		if c.Severity == diff.Safe {
			continue
		}
		f := finding{check: c, every: everyObject[c.Check]}
		var hits []diff.Hit
		for i, im := range res.Impact {
			if used[i] || im.Check != c.Check || im.Version != c.Version || im.Path != c.Path || im.Field != c.Field {
				continue
			}
			used[i] = true
			f.n += im.Count
			f.effect = effectWord(im)
			hits = append(hits, im.Objects...)
		}
		if s := ps.unmigrated.at(c.Version); s != nil && strings.HasPrefix(c.Check, "stored-version-") {
			f.stored = s
		}
		if sub, ok := writerChecks[c.Check]; ok {
			if t := ps.written[writes{version: c.Version, sub: sub}]; t != nil {
				f.n, f.effect, f.samples = t.n, writerEffect(c.Check, c.Version), t.names("")
				hits = nil
			}
		}
		if f.every {
			f.n, f.effect = ps.read, "affected"
			f.samples = ps.all.names("")
		} else {
			sort.SliceStable(hits, func(i, j int) bool {
				return sample{hits[i].Namespace, hits[i].Name}.less(sample{hits[j].Namespace, hits[j].Name})
			})
			for _, h := range hits {
				if len(f.samples) < maxSamples {
					f.samples = append(f.samples, h.String())
				}
			}
		}
		line := f.line()
		v.lines = append(v.lines, line)
		if c.Severity == diff.Unknown || f.n > 0 {
			v.refused = append(v.refused, c.Check)
			v.causes = append(v.causes, metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: crdField(new, c), Message: strings.TrimPrefix(line, prefix)})
			v.objects = max(v.objects, f.n)
			refused++
			if c.Severity == diff.Unknown {
				unknown++
			}
		}
	}
	for i, im := range res.Impact {
		if !used[i] && im.Check == impact.Invalid {
			names := make([]string, 0, len(im.Objects))
			for _, h := range im.Objects {
				names = append(names, h.String())
			}
			head := fmt.Sprintf("%s%s already fail the new schema at %s (no check explains it)", prefix, objectsOf(im.Count, ""), im.Version)
			v.lines = append(v.lines, withSamples(head, names, im.Count))
		}
	}
	var why []string
	if n := refused - unknown; n > 0 {
		why = append(why, objectsOf(n, "breaking check")+" stranding objects")
	}
	if unknown > 0 {
		why = append(why, objectsOf(unknown, "check")+" that cannot be told safe")
	}
	v.summary = fmt.Sprintf("fieldwatch's CRD guard refuses this change of %s: %s", new.Name, strings.Join(why, " and "))
	return v
}

// writerEffect says, in a warning, how the clients of the objects a
// writer check counts write them.
func writerEffect(check, version string) string {
	switch check {
	case "status-subresource-removed":
		return "with status written at " + version
	case "scale-subresource-removed":
		return "scaled at " + version
	}
	return "with fields last written at " + version
}

// effectWord says what an impact does to its objects, in a warning.
func effectWord(im diff.Impact) string {
	if im.Effect == diff.Unmigrated {
		return "stored at " + im.Version
	}
	return string(im.Effect)
}

// line is the finding's warning.
func (f *finding) line() string {
	c := f.check
	head := prefix + c.Check
	where := cmpOr(c.Field, c.Path)
	if c.Field == "" && c.Version != "" && strings.HasPrefix(c.Path, "/spec/versions") {
		where = "" // the version says it
	}
	if where != "" {
		head += " " + fit(where, 48)
	}
	switch {
	case c.Against != "":
		head += " (" + c.Against + "->" + c.Version + ")"
	case c.Version != "":
		head += " (" + c.Version + ")"
	}
	var what string
	switch {
	case f.every:
		what = "every object (" + number(f.n) + ")"
	case f.n == 0:
		what = "no object stranded"
	case f.stored != nil && f.stored.maybe.n == 0:
		what = objectsOf(f.n, "") + " stored at " + c.Version
	case f.stored != nil:
		what = objectsOf(f.stored.known.n, "") + " stored at " + c.Version + ", " + number(f.stored.maybe.n) + " may be"
	default:
		what = objectsOf(f.n, "") + " " + f.effect
	}
	if c.Severity == diff.Unknown {
		what = "unknown, counted as breaking; " + what
	}
	return withSamples(head+": "+what, f.samples, f.n)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// crdField is the field of the CRD a check is about, in the apiserver's
// path syntax: spec.scope, spec.versions[1].schema.openAPIV3Schema.properties.spec.
func crdField(crd *apiextensionsv1.CustomResourceDefinition, c diff.Check) string {
	dotted := func(pointer string) string {
		parts := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
		for i, p := range parts {
			if _, err := strconv.Atoi(p); err == nil && i > 0 {
				parts[i-1] += "[" + p + "]"
				parts[i] = ""
			}
		}
		return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), ".")
	}
	if c.Path == "" || strings.HasPrefix(c.Path, "/spec") || strings.HasPrefix(c.Path, "/status") {
		return dotted(c.Path)
	}
	i := slices.IndexFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == c.Version })
	base := "spec.versions[" + strconv.Itoa(i) + "].schema.openAPIV3Schema"
	if rest := dotted(c.Path); rest != "" {
		return base + "." + rest
	}
	return base
}
