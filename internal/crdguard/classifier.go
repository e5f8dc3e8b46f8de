package crdguard

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MigrationAnnotation is the CRD annotation in which `fieldwatch
// crd-migrate` records a finished migration (Migration, as JSON): every
// object whose resourceVersion is at most its ResourceVersion is stored at
// its Version. Writing it by hand claims a migration that did not happen.
const MigrationAnnotation = "fieldwatch.io/migrated"

// Migration is the record of a finished storage migration.
type Migration struct {
	// Version is the storage version every object was rewritten or
	// found at.
	Version string `json:"version"`
	// ResourceVersion is the cluster's revision once every object was:
	// an object last written at or before it is stored at Version.
	ResourceVersion string `json:"resourceVersion"`
	// Objects is how many objects the migration went through, and
	// Rewritten how many of them it wrote (the others were stored at
	// Version already).
	Objects   int `json:"objects"`
	Rewritten int `json:"rewritten"`
	// Time is when it finished.
	Time metav1.Time `json:"time"`
}

// MigrationOf returns the migration record of crd, nil when it has none.
// A record that does not read is an error.
func MigrationOf(crd *apiextensionsv1.CustomResourceDefinition) (*Migration, error) {
	raw, ok := crd.Annotations[MigrationAnnotation]
	if !ok {
		return nil, nil
	}
	var m Migration
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", MigrationAnnotation, err)
	}
	if _, err := strconv.ParseUint(m.ResourceVersion, 10, 64); err != nil || m.Version == "" {
		return nil, fmt.Errorf("annotation %s: want a version and a numeric resourceVersion, got %q", MigrationAnnotation, raw)
	}
	return &m, nil
}

// Annotation returns m as MigrationAnnotation's value.
func (m Migration) Annotation() (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode migration record: %w", err)
	}
	return string(b), nil
}

// epoch is a span of revisions in which a CRD's objects were written at
// one storage version: from (exclusive) up to the next epoch's from.
// version "" is a span in which the version is not known (a switch not
// settled yet, a gap in what the ledger saw).
type epoch struct {
	version string
	from    uint64
}

// Classifier tells, from an object's resourceVersion (the etcd revision
// of its last write), which version of its CRD the object is stored at.
// Build it with Ledger.Classifier or NewClassifier; it is immutable and
// safe for concurrent use.
type Classifier struct {
	epochs []epoch // by from, ascending
	// stored is the CRD's status.storedVersions.
	stored []string
	// migrated is the CRD's migration record (nil without one) and
	// migratedRV its revision.
	migrated   *Migration
	migratedRV uint64
	// horizon, when not zero, is the last revision of the CRD the ledger
	// has seen: writes after it are not placed (a switch may be on its
	// way).
	horizon uint64
}

// NewClassifier returns what a ledger that has just seen crd knows: the
// objects last written after crd's last write are at its storage version
// if that write is at least settle old (by its managedFields' times,
// against now), and unknown otherwise; the objects before it are unknown,
// unless status.storedVersions lists one version or a migration record
// covers them. `fieldwatch crd-diff --cluster` and crd-migrate use it, and
// a Ledger for a CRD it has not seen.
func NewClassifier(crd *apiextensionsv1.CustomResourceDefinition, now time.Time, settle time.Duration) *Classifier {
	c := &Classifier{stored: slices.Clone(crd.Status.StoredVersions)}
	c.setMigration(crd)
	rv, err := strconv.ParseUint(crd.ResourceVersion, 10, 64)
	if err != nil {
		return c
	}
	v := ""
	if last := lastWrite(crd.ManagedFields); !last.IsZero() && now.Sub(last) >= settle {
		v = storageVersion(crd)
	}
	c.epochs = []epoch{{version: v, from: rv}}
	return c
}

func (c *Classifier) setMigration(crd *apiextensionsv1.CustomResourceDefinition) {
	m, err := MigrationOf(crd)
	if err != nil || m == nil {
		return
	}
	c.migrated = m
	c.migratedRV, _ = strconv.ParseUint(m.ResourceVersion, 10, 64)
}

// Version returns the version an object last written at resourceVersion
// is stored at, "" when it is not known (MayBe then says which versions
// it can be).
func (c *Classifier) Version(resourceVersion string) string {
	r, err := strconv.ParseUint(resourceVersion, 10, 64)
	switch {
	case err != nil:
		return c.fallback()
	case c.migrated != nil && r <= c.migratedRV:
		return c.migrated.Version
	case c.horizon != 0 && r > c.horizon:
		return c.fallback()
	}
	// The epoch r falls in: the last one that starts before it.
	i := sort.Search(len(c.epochs), func(i int) bool { return c.epochs[i].from >= r })
	if i > 0 && c.epochs[i-1].version != "" {
		return c.epochs[i-1].version
	}
	return c.fallback()
}

// fallback is the version of an object the epochs do not place: the one
// stored version when status.storedVersions lists one.
func (c *Classifier) fallback() string {
	if len(c.stored) == 1 {
		return c.stored[0]
	}
	return ""
}

// CanPlace reports whether any object may be stored at version v: it is
// in status.storedVersions, the migration record's, or one the ledger
// saw the CRD store at.
func (c *Classifier) CanPlace(v string) bool {
	if slices.Contains(c.stored, v) || (c.migrated != nil && c.migrated.Version == v) {
		return true
	}
	return slices.ContainsFunc(c.epochs, func(e epoch) bool { return e.version == v })
}

// MayBe returns the versions an object whose Version is unknown may be
// stored at: status.storedVersions, where the apiserver records every
// storage version it has written since the list was last cut.
func (c *Classifier) MayBe() []string { return c.stored }

// lastWrite returns the latest time of the managedFields entries: the
// time of the object's last write that changed anything.
func lastWrite(entries []metav1.ManagedFieldsEntry) time.Time {
	var last time.Time
	for _, e := range entries {
		if e.Time != nil && e.Time.After(last) {
			last = e.Time.Time
		}
	}
	return last
}

// storageVersion is the name of crd's storage version, "" when it has
// none.
func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}
