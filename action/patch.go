package action

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/fieldwatch/fieldwatch/rules"
)

// fieldManager is the field manager of fieldwatch's patches.
const fieldManager = "fieldwatch"

// patchAction patches the object a firing is about, guarded by its UID so
// that it never patches a newer object of the same name.
type patchAction struct {
	spec   *rules.PatchAction
	dyn    dynamic.Interface
	dryRun bool
	log    *slog.Logger
}

var _ handler = &patchAction{}

func newPatch(spec *rules.PatchAction, dyn dynamic.Interface, dryRun bool, log *slog.Logger) *patchAction {
	return &patchAction{spec: spec, dyn: dyn, dryRun: dryRun, log: log}
}

func (p *patchAction) attempt(ctx context.Context, it *item) error {
	o := it.f.Object
	if o.UID == "" || o.Name == "" {
		return permanent(errors.New("patch: the firing has no object UID to guard the patch with"))
	}
	if p.dryRun {
		pt, body, err := p.body(o.UID, "")
		if err != nil {
			return permanent(err)
		}
		withFiring(p.log, it).Info("dry run: patch not sent",
			"patchType", string(pt), "subresource", p.spec.Subresource, "patch", json.RawMessage(body))
		return nil
	}
	if p.dyn == nil {
		return permanent(errors.New("patch: no Kubernetes client configured"))
	}
	client := p.resource(o)
	// A merge patch to a subresource also carries the object's
	// resourceVersion: the status strategy resets metadata before the UID
	// could be compared, while the resourceVersion precondition is checked
	// first (and a recreated object never has an old resourceVersion).
	// The firing's may be stale: on a conflict, read the object, and
	// patch again with its resourceVersion if it is still the same object
	// (client-go's RetryOnConflict: a few tries, then the attempt fails and
	// is retried with backoff).
	rv := ""
	if p.spec.JSON == nil && p.spec.Subresource != "" {
		rv = o.ResourceVersion
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := p.patch(ctx, client, o, rv)
		if !apierrors.IsConflict(err) {
			return err
		}
		cur, gone := p.current(ctx, client, o)
		if gone != nil {
			return permanent(fmt.Errorf("%w (%v)", gone, err)) // no longer a conflict: stops
		}
		if cur != "" && rv != "" {
			rv = cur
		}
		return err
	})
	switch {
	case err == nil:
		return nil
	case isPermanent(err):
		return err
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		// A failed UID guard reads as an invalid request: say which.
		if _, gone := p.current(ctx, client, o); gone != nil {
			return permanent(fmt.Errorf("%w (%w)", gone, err))
		}
	}
	return classifyKube(err)
}

func (p *patchAction) patch(ctx context.Context, client dynamic.ResourceInterface, o rules.ObjectRef, rv string) error {
	pt, body, err := p.body(o.UID, rv)
	if err != nil {
		return permanent(err)
	}
	var sub []string
	if p.spec.Subresource != "" {
		sub = []string{p.spec.Subresource}
	}
	_, err = client.Patch(ctx, o.Name, pt, body, metav1.PatchOptions{FieldManager: fieldManager}, sub...)
	if err != nil {
		return fmt.Errorf("patch %s %s/%s: %w", gvrString(o), o.Namespace, o.Name, err)
	}
	return nil
}

func (p *patchAction) resource(o rules.ObjectRef) dynamic.ResourceInterface {
	gvr := schema.GroupVersionResource{Group: o.Group, Version: o.Version, Resource: o.Resource}
	if o.Namespace == "" {
		return p.dyn.Resource(gvr)
	}
	return p.dyn.Resource(gvr).Namespace(o.Namespace)
}

// current reads the object: its resourceVersion when it is still the
// firing's object; an error (gone) when it was deleted or replaced by
// another object of the same name; neither when it cannot be told now.
func (p *patchAction) current(ctx context.Context, client dynamic.ResourceInterface, o rules.ObjectRef) (rv string, gone error) {
	cur, err := client.Get(ctx, o.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", fmt.Errorf("object %s/%s (uid %s) was deleted", o.Namespace, o.Name, o.UID)
	case err != nil:
		return "", nil
	case string(cur.GetUID()) != o.UID:
		return "", fmt.Errorf("object %s/%s was replaced: uid %s, the firing's %s", o.Namespace, o.Name, cur.GetUID(), o.UID)
	}
	return cur.GetResourceVersion(), nil
}

// body returns the patch with its UID guard: metadata.uid inside a merge
// patch (the apiserver refuses to change a UID, so a patch meant for an
// older object fails), or a leading test of /metadata/uid in a JSON patch.
// A non-empty rv is set as metadata.resourceVersion of a merge patch.
func (p *patchAction) body(uid, rv string) (types.PatchType, []byte, error) {
	if p.spec.JSON != nil {
		ops := make([]map[string]any, 0, len(p.spec.JSON)+1)
		ops = append(ops, map[string]any{"op": "test", "path": "/metadata/uid", "value": uid})
		ops = append(ops, p.spec.JSON...)
		b, err := json.Marshal(ops)
		if err != nil {
			return "", nil, fmt.Errorf("encode JSON patch: %w", err)
		}
		return types.JSONPatchType, b, nil
	}
	patch := maps.Clone(p.spec.Merge)
	if patch == nil {
		patch = map[string]any{}
	}
	meta := map[string]any{}
	if m, ok := patch["metadata"].(map[string]any); ok {
		meta = maps.Clone(m)
	}
	meta["uid"] = uid
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	patch["metadata"] = meta
	b, err := json.Marshal(patch)
	if err != nil {
		return "", nil, fmt.Errorf("encode merge patch: %w", err)
	}
	return types.MergePatchType, b, nil
}
