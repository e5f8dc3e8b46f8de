package crdguard

import (
	"context"
	"fmt"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
)

// MigrateOptions configure Migrate.
type MigrateOptions struct {
	// Dynamic reads and writes the CRD and its objects. Required.
	Dynamic dynamic.Interface
	// PageSize is the objects listed per page (default DefaultPageSize).
	PageSize int64
	// Settle is how old the CRD's last write must be before the objects
	// are rewritten, so that every apiserver writes at its storage
	// version (default DefaultSettle).
	Settle time.Duration
	// Force rewrites the objects even when status.storedVersions lists
	// the storage version alone.
	Force bool
	// Progress, if set, is called after each page.
	Progress func(MigrateResult)
	// Clock times the settling (default the real clock).
	Clock clock.Clock
	// FieldManager names the writer (default "fieldwatch-crd-migrate").
	FieldManager string
}

// MigrateResult is how far a migration got.
type MigrateResult struct {
	// CRD is the CRD's name, Version its storage version.
	CRD, Version string
	// StoredVersions is status.storedVersions before, and after once
	// Done.
	StoredVersions []string
	// Objects is how many objects were gone through; Rewritten how many
	// of them the apiserver wrote (they were stored at another version,
	// or in another encoding); Gone how many were deleted meanwhile.
	Objects, Rewritten, Gone int
	// Failed is how many could not be written, FirstError the first
	// error.
	Failed     int
	FirstError error
	// Done is set once status.storedVersions lists the storage version
	// alone: the other versions may leave spec.versions.
	Done bool
}

// Migrate rewrites every object of the CRD name at its storage version,
// then records the migration on the CRD (MigrationAnnotation) and sets
// status.storedVersions to the storage version alone, as the
// apiextensions documentation asks before a version leaves
// spec.versions. Each object gets an update that changes nothing: the
// apiserver writes it when it is stored at another version (its stored
// bytes differ) and leaves it as it is otherwise, so a second run writes
// nothing and the result says which were rewritten. Objects are listed in
// pages; a conflict is retried from a fresh read; an object deleted
// meanwhile is counted as gone. The status changes only when every object
// was gone through and the storage version did not change meanwhile;
// otherwise Migrate returns an error with the result so far, and can be
// run again.
func Migrate(ctx context.Context, name string, opts MigrateOptions) (MigrateResult, error) {
	if opts.PageSize <= 0 {
		opts.PageSize = DefaultPageSize
	}
	if opts.Settle <= 0 {
		opts.Settle = DefaultSettle
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.FieldManager == "" {
		opts.FieldManager = "fieldwatch-crd-migrate"
	}
	crds := opts.Dynamic.Resource(CRDResource)
	crd, err := getCRD(ctx, crds, name)
	if err != nil {
		return MigrateResult{CRD: name}, err
	}
	r := MigrateResult{CRD: name, Version: storageVersion(crd), StoredVersions: crd.Status.StoredVersions}
	if r.Version == "" {
		return r, fmt.Errorf("CustomResourceDefinition %s has no storage version", name)
	}
	if !opts.Force && slices.Equal(crd.Status.StoredVersions, []string{r.Version}) {
		r.Done = true
		return r, nil
	}
	if err := waitSettled(ctx, opts, crd); err != nil {
		return r, err
	}
	res := dynamicFor(opts.Dynamic, crd, r.Version)
	list := metav1.ListOptions{Limit: opts.PageSize}
	for {
		page, err := res.List(ctx, list)
		if err != nil {
			return r, fmt.Errorf("list %s: %w", name, err)
		}
		for i := range page.Items {
			if err := rewrite(ctx, opts.Dynamic, crd, r.Version, &page.Items[i], opts.FieldManager, &r); err != nil {
				return r, err // the context ended
			}
		}
		if opts.Progress != nil {
			opts.Progress(r)
		}
		if list.Continue = page.GetContinue(); list.Continue == "" {
			break
		}
	}
	if r.Failed > 0 {
		return r, fmt.Errorf("%d of %d objects could not be rewritten (the first: %w): status.storedVersions left as it is", r.Failed, r.Objects, r.FirstError)
	}
	// Every object that existed at this revision is now stored at the
	// storage version: rewritten, found there, or written by someone
	// else since the settling.
	last, err := res.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return r, fmt.Errorf("read the cluster's revision: %w", err)
	}
	record := Migration{Version: r.Version, ResourceVersion: last.GetResourceVersion(), Objects: r.Objects, Rewritten: r.Rewritten,
		Time: metav1.NewTime(opts.Clock.Now().UTC().Truncate(time.Second))}
	annotation, err := record.Annotation()
	if err != nil {
		return r, err
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c, err := fromUnstructured(u); err != nil || storageVersion(c) != r.Version || c.UID != crd.UID {
			return fmt.Errorf("CustomResourceDefinition %s changed its storage version or was replaced during the migration: run it again", name)
		}
		annotations := u.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[MigrationAnnotation] = annotation
		u.SetAnnotations(annotations)
		_, err = crds.Update(ctx, u, metav1.UpdateOptions{FieldManager: opts.FieldManager})
		return err
	})
	if err != nil {
		return r, fmt.Errorf("record the migration on CustomResourceDefinition %s: %w", name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedStringSlice(u.Object, []string{r.Version}, "status", "storedVersions"); err != nil {
			return err
		}
		_, err = crds.UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: opts.FieldManager})
		return err
	})
	if err != nil {
		return r, fmt.Errorf("set status.storedVersions of CustomResourceDefinition %s to [%s]: %w", name, r.Version, err)
	}
	r.StoredVersions, r.Done = []string{r.Version}, true
	return r, nil
}

func getCRD(ctx context.Context, crds dynamic.NamespaceableResourceInterface, name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	u, err := crds.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get CustomResourceDefinition %s: %w", name, err)
	}
	return fromUnstructured(u)
}

func fromUnstructured(u *unstructured.Unstructured) (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crd); err != nil {
		return nil, fmt.Errorf("CustomResourceDefinition %s: %w", u.GetName(), err)
	}
	return crd, nil
}

// waitSettled waits until the CRD's last write is Settle old (plus a
// second: managedFields times are whole seconds).
func waitSettled(ctx context.Context, opts MigrateOptions, crd *apiextensionsv1.CustomResourceDefinition) error {
	last := lastWrite(crd.ManagedFields)
	if last.IsZero() {
		return nil
	}
	wait := last.Add(opts.Settle + time.Second).Sub(opts.Clock.Now())
	if wait <= 0 {
		return nil
	}
	select {
	case <-opts.Clock.After(wait):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func dynamicFor(dyn dynamic.Interface, crd *apiextensionsv1.CustomResourceDefinition, version string) dynamic.NamespaceableResourceInterface {
	return dyn.Resource(schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Spec.Names.Plural})
}

// rewrite gives one object an update that changes nothing, from a fresh
// read after a conflict, and counts the outcome in r. It returns an error
// only when ctx ends.
func rewrite(ctx context.Context, dyn dynamic.Interface, crd *apiextensionsv1.CustomResourceDefinition, version string, obj *unstructured.Unstructured, manager string, r *MigrateResult) error {
	client := dynamicFor(dyn, crd, version).Namespace(obj.GetNamespace())
	if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
		client = dynamicFor(dyn, crd, version)
	}
	r.Objects++
	before := obj.GetResourceVersion()
	var after string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		updated, err := client.Update(ctx, obj, metav1.UpdateOptions{FieldManager: manager})
		if apierrors.IsConflict(err) {
			fresh, gerr := client.Get(ctx, obj.GetName(), metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			obj, before = fresh, fresh.GetResourceVersion()
			return err
		}
		if err == nil {
			after = updated.GetResourceVersion()
		}
		return err
	})
	switch {
	case err == nil && after != before:
		r.Rewritten++
	case err == nil:
	case apierrors.IsNotFound(err):
		r.Gone++
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		r.Failed++
		if r.FirstError == nil {
			r.FirstError = fmt.Errorf("%s: %w", objectName(obj), err)
		}
	}
	return nil
}

func objectName(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}
