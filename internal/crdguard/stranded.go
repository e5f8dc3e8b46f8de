package crdguard

import (
	"fmt"
	"slices"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/fieldwatch/fieldwatch/crd/diff"
)

// Unmigrated counts the objects stored, or maybe stored, at the versions a
// CRD change takes out of spec.versions or status.storedVersions, as a
// Classifier places them: the impact of those versions' removal, which
// the guard and `fieldwatch crd-diff --cluster` report. It is not safe
// for concurrent use; a nil *Unmigrated counts nothing.
type Unmigrated struct {
	cl       *Classifier
	versions map[string]*stranded
}

// stranded are the objects stored at a version the change removes.
type stranded struct {
	known tally // the classifier places them there
	maybe tally // it does not know where they are, and they may be there
	// mayBe is set when the version is in status.storedVersions: the
	// objects the classifier cannot place may be there.
	mayBe bool
}

// NewUnmigrated returns the count for the change of old to new, nil when
// the change removes no version objects may be stored at.
func NewUnmigrated(old, new *apiextensionsv1.CustomResourceDefinition, cl *Classifier) *Unmigrated {
	u := &Unmigrated{cl: cl, versions: map[string]*stranded{}}
	note := func(v string) {
		if u.versions[v] == nil && cl.CanPlace(v) {
			u.versions[v] = &stranded{mayBe: slices.Contains(cl.MayBe(), v)}
		}
	}
	for _, ov := range old.Spec.Versions {
		if !slices.ContainsFunc(new.Spec.Versions, func(nv apiextensionsv1.CustomResourceDefinitionVersion) bool { return nv.Name == ov.Name }) {
			note(ov.Name)
		}
	}
	if len(new.Status.StoredVersions) > 0 {
		for _, v := range old.Status.StoredVersions {
			if !slices.Contains(new.Status.StoredVersions, v) {
				note(v)
			}
		}
	}
	if len(u.versions) == 0 {
		return nil
	}
	return u
}

// Add counts one object.
func (u *Unmigrated) Add(namespace, name, resourceVersion string) {
	if u == nil {
		return
	}
	if v := u.cl.Version(resourceVersion); v != "" {
		if s := u.versions[v]; s != nil {
			s.known.add(namespace, name)
		}
		return
	}
	for _, s := range u.versions {
		if s.mayBe {
			s.maybe.add(namespace, name)
		}
	}
}

// at returns the count of version v, nil when the change does not remove
// it.
func (u *Unmigrated) at(v string) *stranded {
	if u == nil {
		return nil
	}
	return u.versions[v]
}

// Record adds to res, for each version removed with objects, their impact
// (diff.Unmigrated) to the version's stored-version check; for a version
// status.storedVersions no longer lists but the classifier places objects
// at, it adds a stored-version-removed check of its own, under p.
func (u *Unmigrated) Record(res *diff.Result, p *diff.Policy) {
	if u == nil {
		return
	}
	removed := u.versions
	versions := make([]string, 0, len(removed))
	for v := range removed {
		versions = append(versions, v)
	}
	sort.Strings(versions)
	for _, v := range versions {
		s := removed[v]
		n := s.known.n + s.maybe.n
		if n == 0 {
			continue
		}
		i := slices.IndexFunc(res.Checks, func(c diff.Check) bool {
			return c.Version == v && (c.Check == "stored-version-removed" || c.Check == "stored-version-cleared")
		})
		if i < 0 {
			c, ok := storedVersionRemoved(v, p)
			if !ok || s.known.n == 0 {
				continue
			}
			res.Checks = append(res.Checks, c)
			i = len(res.Checks) - 1
			switch c.Severity {
			case diff.Unknown:
				res.Breaking++
				res.Unknown++
			case diff.Breaking:
				res.Breaking++
			default:
				res.Safe++
			}
		}
		c := res.Checks[i]
		im := diff.Impact{Check: c.Check, Version: v, Path: c.Path, Field: c.Field, Effect: diff.Unmigrated, Count: n, Objects: []diff.Hit{}}
		for _, t := range []struct {
			tally *tally
			what  string
		}{{&s.known, "stored at " + v}, {&s.maybe, "may be stored at " + v}} {
			for _, o := range t.tally.first {
				if len(im.Objects) < diff.MaxSamples {
					im.Objects = append(im.Objects, diff.Hit{Namespace: o.ns, Name: o.name, Error: t.what})
				}
			}
		}
		im.Message = fmt.Sprintf("%d object(s) are stored at %s and %d may be (last written before fieldwatch could tell): "+
			"rewrite them at the storage version first (fieldwatch crd-migrate)", s.known.n, v, s.maybe.n)
		res.Impact = append(res.Impact, im)
	}
}

// storedVersionRemoved is the check of a version that leaves spec.versions
// while the ledger places objects at it though status.storedVersions no
// longer lists it, under p; false when p ignores it.
func storedVersionRemoved(v string, p *diff.Policy) (diff.Check, bool) {
	c := diff.Check{Version: v, Path: "/spec/versions", Check: "stored-version-removed", Old: v, Severity: diff.Breaking,
		Message: fmt.Sprintf("version %s leaves spec.versions while objects are still stored at it (fieldwatch's storage-version ledger), "+
			"though status.storedVersions no longer lists it", v)}
	if p != nil {
		if p.Ignore[c.Check] {
			return c, false
		}
		if s, ok := p.Severity[c.Check]; ok {
			c.Severity = s
		}
	}
	return c, true
}
