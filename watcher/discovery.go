package watcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/fieldwatch/fieldwatch/change"
)

// discovered is one discovery pass: every resource served at every version
// that can be listed and watched, and the group versions whose discovery
// failed (an aggregated API whose service is down, say). Resources of failed
// group versions are unknown, not gone.
type discovered struct {
	resources []change.Resource
	failed    map[schema.GroupVersion]error
}

// discover asks the apiserver for every group, version and resource.
// isCustom says which group resources a CRD serves.
func discover(client discovery.DiscoveryInterface, isCustom func(schema.GroupResource) bool) (discovered, error) {
	groups, lists, err := client.ServerGroupsAndResources()
	d := discovered{failed: map[schema.GroupVersion]error{}}
	if err != nil {
		var partial *discovery.ErrGroupDiscoveryFailed
		if !errors.As(err, &partial) {
			return d, fmt.Errorf("discover resources: %w", err)
		}
		for gv, gerr := range partial.Groups {
			d.failed[gv] = gerr
		}
	}
	byGV := map[string]*metav1.APIResourceList{}
	for _, l := range lists {
		if l != nil {
			byGV[l.GroupVersion] = l
		}
	}
	for _, g := range groups {
		d.resources = append(d.resources, groupResources(g, byGV, isCustom)...)
	}
	return d, nil
}

// groupResources lists one group's resources. A resource's preferred
// version is the group's preferred version when it serves the resource,
// otherwise the first version in the group's priority order that does
// (what kubectl and ServerPreferredResources do).
func groupResources(g *metav1.APIGroup, byGV map[string]*metav1.APIResourceList, isCustom func(schema.GroupResource) bool) []change.Resource {
	versions := make([]string, 0, len(g.Versions))
	if g.PreferredVersion.Version != "" {
		versions = append(versions, g.PreferredVersion.Version)
	}
	for _, v := range g.Versions {
		if v.Version != g.PreferredVersion.Version {
			versions = append(versions, v.Version)
		}
	}
	var out []change.Resource
	preferred := map[string]bool{}
	for _, v := range versions {
		gv := schema.GroupVersion{Group: g.Name, Version: v}
		list := byGV[gv.String()]
		if list == nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "watch") {
				continue // subresources, and what cannot be watched
			}
			gr := schema.GroupResource{Group: g.Name, Resource: r.Name}
			out = append(out, change.Resource{
				Group:      g.Name,
				Version:    v,
				Resource:   r.Name,
				Kind:       r.Kind,
				Namespaced: r.Namespaced,
				Custom:     isCustom(gr),
				Preferred:  !preferred[r.Name],
			})
			preferred[r.Name] = true
		}
	}
	return out
}

// builtinGroup guesses whether a group is served by kube-apiserver itself,
// for when the CRD list cannot be read: the core group, groups without a
// dot (apps, batch, ...) and *.k8s.io groups (CRDs may use those only with
// an api-approved annotation).
func builtinGroup(group string) bool {
	return group == "" || !strings.Contains(group, ".") || strings.HasSuffix(group, ".k8s.io")
}

// Discover lists every resource the cluster serves that can be listed and
// watched, at every version, CRD-backed ones marked Custom, and the group
// versions whose discovery failed (partial results are still returned).
// It is `fieldwatch api-resources`.
func Discover(ctx context.Context, config *rest.Config) ([]change.Resource, map[schema.GroupVersion]error, error) {
	disc, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return nil, nil, fmt.Errorf("discovery client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, nil, fmt.Errorf("dynamic client: %w", err)
	}
	isCustom := func(gr schema.GroupResource) bool { return !builtinGroup(gr.Group) }
	if list, err := dyn.Resource(gvr(crdResource)).List(ctx, metav1.ListOptions{}); err == nil {
		set := map[schema.GroupResource]bool{}
		for _, item := range list.Items {
			group, _, _ := unstructured.NestedString(item.Object, "spec", "group")
			plural, _, _ := unstructured.NestedString(item.Object, "spec", "names", "plural")
			set[schema.GroupResource{Group: group, Resource: plural}] = true
		}
		isCustom = func(gr schema.GroupResource) bool { return set[gr] }
	}
	d, err := discover(disc, isCustom)
	return d.resources, d.failed, err
}
