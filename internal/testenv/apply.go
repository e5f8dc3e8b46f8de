package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// ApplyOptions change how Apply writes objects.
type ApplyOptions struct {
	// DryRun asks the apiserver to validate and admit without persisting.
	DryRun bool
	// FieldManager names the writer (default "fieldwatch-testenv").
	FieldManager string
}

// ApplyFiles server-side applies every object of the YAML files.
func (e *Env) ApplyFiles(ctx context.Context, opts ApplyOptions, paths ...string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return out, err
		}
		objs, err := e.Apply(ctx, opts, data)
		out = append(out, objs...)
		if err != nil {
			return out, fmt.Errorf("%s: %w", p, err)
		}
	}
	return out, nil
}

// Apply server-side applies every object of a multi-document YAML stream,
// in order. A kind the apiserver does not serve yet (a CRD applied just
// before) is retried for a few seconds while discovery catches up.
func (e *Env) Apply(ctx context.Context, opts ApplyOptions, data []byte) ([]*unstructured.Unstructured, error) {
	if opts.FieldManager == "" {
		opts.FieldManager = "fieldwatch-testenv"
	}
	dyn, err := dynamic.NewForConfig(e.Config())
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(e.Config())
	if err != nil {
		return nil, err
	}
	cached := memory.NewMemCacheClient(disc)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cached)

	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, fmt.Errorf("decode: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		applied, err := e.applyOne(ctx, dyn, mapper, &obj, opts)
		if err != nil {
			return out, err
		}
		out = append(out, applied)
	}
}

func (e *Env) applyOne(ctx context.Context, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, obj *unstructured.Unstructured, opts ApplyOptions) (*unstructured.Unstructured, error) {
	gvk := obj.GroupVersionKind()
	deadline := time.Now().Add(15 * time.Second)
	for {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			ri := dynamic.ResourceInterface(dyn.Resource(m.Resource))
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				ns := obj.GetNamespace()
				if ns == "" {
					ns = "default"
				}
				ri = dyn.Resource(m.Resource).Namespace(ns)
			}
			body, err := obj.MarshalJSON()
			if err != nil {
				return nil, err
			}
			force := true
			po := metav1.PatchOptions{FieldManager: opts.FieldManager, Force: &force}
			if opts.DryRun {
				po.DryRun = []string{metav1.DryRunAll}
			}
			applied, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, po)
			if err != nil {
				return nil, fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
			}
			if gvk.Kind == "CustomResourceDefinition" && !opts.DryRun {
				if err := e.waitEstablished(ctx, dyn, obj.GetName()); err != nil {
					return nil, err
				}
				mapper.Reset()
			}
			return applied, nil
		}
		if !meta.IsNoMatchError(err) || time.Now().After(deadline) {
			return nil, fmt.Errorf("map %s: %w", gvk, err)
		}
		mapper.Reset()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitEstablished waits until the CRD's Established condition is true.
func (e *Env) waitEstablished(ctx context.Context, dyn dynamic.Interface, name string) error {
	crds := dyn.Resource(crdGVR)
	deadline := time.Now().Add(30 * time.Second)
	for {
		crd, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRD %s not established after 30s (last error: %v)", name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
