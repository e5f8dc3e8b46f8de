package watcher

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/change"
)

// gvr returns r's group, version and resource for client-go.
func gvr(r change.Resource) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
}

// groupResource returns r's group and resource: what stays the same
// across its versions.
func groupResource(r change.Resource) schema.GroupResource {
	return schema.GroupResource{Group: r.Group, Resource: r.Resource}
}

// groupVersion returns r's group and version.
func groupVersion(r change.Resource) schema.GroupVersion {
	return schema.GroupVersion{Group: r.Group, Version: r.Version}
}
