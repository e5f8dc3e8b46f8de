package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeFlags are the flags that say how to reach the cluster.
type kubeFlags struct {
	kubeconfig, context string
	qps                 float64
	burst               int
}

func (k *kubeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster service account, else $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&k.context, "context", "", "kubeconfig context to use (default: its current context)")
	fs.Float64Var(&k.qps, "kube-qps", 50, "client requests per second to the apiserver: discovery, actions, impact scans, leases (the informers' lists and watches are not throttled client-side; the apiserver's priority and fairness paces them)")
	fs.IntVar(&k.burst, "kube-burst", 100, "client request burst")
}

// config returns the client configuration: the pod's service account when
// running in a cluster and no kubeconfig is named, otherwise kubectl's
// loading rules (--kubeconfig, $KUBECONFIG, ~/.kube/config) and --context.
func (k *kubeFlags) config() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if k.kubeconfig == "" && k.context == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
	} else {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = k.kubeconfig
		overrides := &clientcmd.ConfigOverrides{CurrentContext: k.context}
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
	}
	cfg.QPS = float32(k.qps)
	cfg.Burst = k.burst
	cfg.UserAgent = "fieldwatch/" + version
	return cfg, nil
}
