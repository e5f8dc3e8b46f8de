package app

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fieldwatch/fieldwatch/watcher"
)

// shard returns this replica's shard and finds out whether the apiserver
// filters by shard itself (ShardedListAndWatch): it echoes a list's shard
// selector in metadata.shardInfo when it does.
func (a *app) shard(ctx context.Context) (watcher.Shard, error) {
	s := watcher.Shard{Index: a.cfg.Shard, Total: a.cfg.TotalShards}
	if err := s.Validate(); err != nil {
		return s, err
	}
	if s.Total <= 1 {
		return s, nil
	}
	namespaces := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	list, err := a.dyn.Resource(namespaces).List(ctx, metav1.ListOptions{Limit: 1, ShardSelector: s.Selector()})
	if err != nil {
		// Without permission to list namespaces (the generated RBAC does
		// not grant it) the probe cannot tell: filter on the client,
		// which is correct everywhere.
		a.log.Warn("cannot probe server-side sharding; filtering on the client", "error", err)
	} else {
		meta, _ := list.Object["metadata"].(map[string]any)
		_, s.ServerSide = meta["shardInfo"]
	}
	mode := "client-side: every replica receives every object and drops the others'"
	if s.ServerSide {
		mode = "server-side: the apiserver sends this replica only its objects"
		a.metrics.serverShard.Set(1)
	}
	a.log.Info("sharding", "shard", s.Index, "total", s.Total, "selector", s.Selector(), "mode", mode)
	return s, nil
}
