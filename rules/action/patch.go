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
	pt, body, err := p.body(o.UID)
	if err != nil {
		return permanent(err)
	}
	var sub []string
	if p.spec.Subresource != "" {
		sub = []string{p.spec.Subresource}
	}
	if p.dryRun {
		withFiring(p.log, it).Info("dry run: patch not sent",
			"patchType", string(pt), "subresource", p.spec.Subresource, "patch", json.RawMessage(body))
		return nil
	}
	if p.dyn == nil {
		return permanent(errors.New("patch: no Kubernetes client configured"))
	}
	client := p.resource(o)
	_, err = client.Patch(ctx, o.Name, pt, body, metav1.PatchOptions{FieldManager: fieldManager}, sub...)
	if err == nil {
		return nil
	}
	err = fmt.Errorf("patch %s %s/%s: %w", gvrString(o), o.Namespace, o.Name, err)
	if apierrors.IsConflict(err) {
		// A conflict is worth retrying, unless the object is not the one
		// the firing is about any more (the UID guard can surface as a
		// conflict too).
		if gone := p.replaced(ctx, client, o); gone != nil {
			return permanent(fmt.Errorf("%w (%w)", gone, err))
		}
		return err
	}
	return classifyKube(err)
}

func (p *patchAction) resource(o rules.ObjectRef) dynamic.ResourceInterface {
	gvr := schema.GroupVersionResource{Group: o.Group, Version: o.Version, Resource: o.Resource}
	if o.Namespace == "" {
		return p.dyn.Resource(gvr)
	}
	return p.dyn.Resource(gvr).Namespace(o.Namespace)
}

// replaced returns an error when the object is gone or is another object
// under the same name; nil when it is still the firing's object or that
// cannot be told now.
func (p *patchAction) replaced(ctx context.Context, client dynamic.ResourceInterface, o rules.ObjectRef) error {
	cur, err := client.Get(ctx, o.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("object %s/%s (uid %s) was deleted", o.Namespace, o.Name, o.UID)
	case err != nil:
		return nil
	case string(cur.GetUID()) != o.UID:
		return fmt.Errorf("object %s/%s was replaced: uid %s, the firing's %s", o.Namespace, o.Name, cur.GetUID(), o.UID)
	}
	return nil
}

// body returns the patch with its UID guard: metadata.uid inside a merge
// patch (the apiserver refuses to change a UID, so a patch meant for an
// older object fails), or a leading test of /metadata/uid in a JSON patch.
func (p *patchAction) body(uid string) (types.PatchType, []byte, error) {
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
	patch["metadata"] = meta
	b, err := json.Marshal(patch)
	if err != nil {
		return "", nil, fmt.Errorf("encode merge patch: %w", err)
	}
	return types.MergePatchType, b, nil
}
