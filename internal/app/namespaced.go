package app

import (
	"context"
	"time"

	"github.com/fieldwatch/fieldwatch/rules"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// discoveryTimeout bounds the discovery that tells a namespaced install's
// check which resources are cluster-scoped.
const discoveryTimeout = 30 * time.Second

// checkNamespaced refuses, in a namespaced install (Config.Namespaces),
// rules that name a namespace outside it or select cluster-scoped
// resources, as discovery tells: the errors name each entry's
// FILE:LINE:COL. When discovery fails the built-in cluster-scoped
// resources are checked only; the watcher does not watch a cluster-scoped
// resource in a namespaced install anyway.
func (a *app) checkNamespaced(ctx context.Context, set *rules.Set) error {
	if len(a.cfg.Namespaces) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	defer cancel()
	resources, _, err := watcher.Discover(ctx, a.cfg.Rest)
	if err != nil {
		a.log.Warn("cannot discover resources to check the rules against the namespaced install; checking the built-in cluster-scoped resources only", "error", err)
	}
	return set.CheckNamespaced(rules.Namespaced{Namespaces: a.cfg.Namespaces, Resources: resources})
}
