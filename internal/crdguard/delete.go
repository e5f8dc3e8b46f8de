package crdguard

import (
	"context"
	"fmt"
	"sort"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubeversion "k8s.io/apimachinery/pkg/version"
)

// reviewDelete reviews the DELETE of a CRD: the apiserver deletes every
// object of it with it.
func (g *Guard) reviewDelete(ctx context.Context, req *admissionv1.AdmissionRequest, p *progress) *Decision {
	p.at("reading the CRD")
	crd, err := decodeCRD(req.OldObject.Raw)
	if err != nil {
		return g.conclude(req, nil, verdict{incomplete: "cannot read the CRD being deleted: " + err.Error()})
	}
	res := schema.GroupVersionResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}
	for _, v := range crd.Spec.Versions {
		if v.Served && (res.Version == "" || kubeversion.CompareKubeAwareVersionStrings(v.Name, res.Version) > 0) {
			res.Version = v.Name
		}
	}
	if res.Version == "" {
		res.Version = storageVersion(crd)
	}
	ps := newPass(ctx, g.max, p)
	ps.byNS = map[string]*tally{}
	p.at("counting the objects")
	origin, err := g.source.Objects(ctx, res, 0, ps.add)
	g.metrics.objects.WithLabelValues(origin).Add(float64(ps.read))
	incomplete := ps.incomplete(err, maxObjectsFlag)
	if err != nil {
		g.metrics.incomplete.WithLabelValues(reason(err)).Inc()
	}
	if ps.read == 0 {
		if incomplete == "" {
			return allow() // nothing is lost
		}
		return g.conclude(req, crd, verdict{incomplete: incomplete})
	}
	kind := crd.Spec.Names.Kind
	atLeast := ""
	if incomplete != "" {
		atLeast = "at least "
	}
	v := verdict{incomplete: incomplete, refused: []string{"crd-removed"}, objects: ps.read,
		summary: fmt.Sprintf("fieldwatch's CRD guard refuses to delete CRD %s: the apiserver would delete %s%s with it", crd.Name, atLeast, objectsOf(ps.read, kind))}
	head := fmt.Sprintf("%sdeleting CRD %s deletes %s%s", prefix, crd.Name, atLeast, objectsOf(ps.read, kind))
	if crd.Spec.Scope != "Namespaced" {
		v.lines = []string{withSamples(head, ps.all.names(""), ps.read)}
		return g.conclude(req, crd, v)
	}
	namespaces := make([]string, 0, len(ps.byNS))
	for ns := range ps.byNS {
		namespaces = append(namespaces, ns)
	}
	sort.Slice(namespaces, func(i, j int) bool {
		a, b := ps.byNS[namespaces[i]], ps.byNS[namespaces[j]]
		if a.n != b.n {
			return a.n > b.n
		}
		return namespaces[i] < namespaces[j]
	})
	v.lines = append(v.lines, fit(fmt.Sprintf("%s in %s", head, objectsOf(len(namespaces), "namespace")), maxLine))
	shown := namespaces[:min(len(namespaces), maxWarnings-3)]
	for _, ns := range shown {
		t := ps.byNS[ns]
		v.lines = append(v.lines, withSamples(fmt.Sprintf("%s  %s: %s", prefix, ns, objectsOf(t.n, kind)), t.names(ns), t.n))
	}
	if rest := namespaces[len(shown):]; len(rest) > 0 {
		n := 0
		for _, ns := range rest {
			n += ps.byNS[ns].n
		}
		v.lines = append(v.lines, fit(fmt.Sprintf("%s  and %s more with %s", prefix, objectsOf(len(rest), "namespace"), objectsOf(n, kind)), maxLine))
	}
	return g.conclude(req, crd, v)
}
