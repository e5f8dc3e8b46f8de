package watcher_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/watcher"
)

// A watcher of Deployments and of the custom resources of every CRD, with
// a restart baseline: it prints each change until interrupted, and on the
// next start what changed while it was down. It needs a cluster, so this
// example is compiled but not run.
func Example() {
	config, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Println(err)
		return
	}
	store, err := watcher.OpenStore("baseline.db", slog.Default())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = store.Close() }()
	w, err := watcher.New(config, watcher.Config{
		Selectors: []change.Selector{
			{Group: "apps", Kind: "Deployment"},
			{Group: "*", Kind: "*", Custom: true},
		},
		// Keep only what the handler reads of each object.
		Projection: func(change.Resource) change.Projection {
			return change.Projection{Paths: [][]string{{"spec"}}}
		},
		Store: store,
		Handler: watcher.HandlerFunc(func(ctx context.Context, c *watcher.Change) error {
			o := c.Object()
			fmt.Println(c.Type, c.Resource.Kind, o.GetNamespace()+"/"+o.GetName(), o.GetResourceVersion())
			if c.Type == change.Updated {
				fmt.Println("  spec was", c.Old.Map()["spec"], "is", c.New.Map()["spec"])
			}
			return nil
		}),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := w.Run(ctx); err != nil {
		fmt.Println(err)
	}
}
