package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/fieldwatch/fieldwatch/fieldmetrics"
	"github.com/fieldwatch/fieldwatch/fileerr"
	"github.com/fieldwatch/fieldwatch/internal/rbac"
	"github.com/fieldwatch/fieldwatch/rules"
	"github.com/fieldwatch/fieldwatch/watcher"
)

func rbacCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fieldwatch rbac", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		kube      kubeFlags
		ruleFiles files
		opts      rbac.Options
	)
	kube.register(fs)
	fs.Var(&ruleFiles, "rules", "rules file (repeat for several). Required, unless --metrics-config is given")
	metricsConfig := fs.String("metrics-config", "", "also grant what this kube-state-metrics CustomResourceStateMetrics file reads (as the rules files' metrics sections are granted): list and watch on its resources")
	fs.StringVar(&opts.Name, "name", "fieldwatch", "name of the ClusterRole and bindings")
	fs.StringVar(&opts.Namespace, "namespace", "fieldwatch", "namespace of the service account")
	fs.StringVar(&opts.ServiceAccount, "service-account", "fieldwatch", "service account to bind")
	fs.BoolVar(&opts.LeaderElection, "leader-elect", false, "add a Role for the leader election Lease in --namespace")
	fs.BoolVar(&opts.HistoryAPI, "history-api", false, "bind system:auth-delegator (create TokenReviews and SubjectAccessReviews), which the history's API and page need to serve callers with a token")
	offline := fs.Bool("offline", false, "do not ask the cluster how kinds map to resources; guess plurals")
	var crds files
	fs.Var(&crds, "crds", "with --offline: CRD manifests (file or directory; repeat for several) whose custom resources rules that select every custom resource are granted")
	fs.BoolVar(&opts.AllowWildcardPatch, "allow-wildcard-patch", false, "grant patch to rules whose selector is a wildcard (every resource they match, Secrets excepted)")
	fs.Var((*nameList)(&opts.Namespaces), "namespaces", "the RBAC of a namespaced install (fieldwatch run --namespaces with these namespaces): Roles in them only, no ClusterRole; "+
		"rules that name another namespace or select cluster-scoped resources are refused")
	fs.BoolVar(&opts.AdmissionCerts, "admission-certs", false, "add what fieldwatch needs to keep its admission webhook's certificate itself (fieldwatch run --admission-cert-secret): update Secret <name>-admission-tls in --namespace and the caBundle of ValidatingWebhookConfiguration <name>")
	fs.BoolVar(&opts.ReadCRDs, "read-crds", false, "with --namespaces: add a ClusterRole that reads CustomResourceDefinitions, so that new CRDs are followed at once rather than by the periodic discovery")
	output := fs.String("o", "yaml", "output: yaml (RBAC manifests to apply), helm-values (the rbac, admission.rules and crdGuard values, and watchNamespaces, of the Helm chart charts/fieldwatch, which makes the leader election Role itself) "+
		"or admission-webhook (the ValidatingWebhookConfiguration of fieldwatch's admission webhook, fieldwatch run --admission-addr, for the writes the rules may be asked about)")
	var webhook rbac.WebhookOptions
	fs.StringVar(&webhook.Service, "admission-service", "", "with -o admission-webhook: the admission endpoint's Service in --namespace (default <name>-admission)")
	port := fs.Int("admission-port", 443, "with -o admission-webhook: the Service's port")
	caBundle := fs.String("admission-ca-bundle", "", "with -o admission-webhook: a PEM file of the CA of the endpoint's certificate, for caBundle (default none: fieldwatch's certificate rotation, --admission-cert-secret, or cert-manager fills it in)")
	certManager := fs.String("admission-cert-manager-certificate", "", "with -o admission-webhook: NAMESPACE/NAME of the cert-manager Certificate whose CA cert-manager's CA injector keeps in caBundle")
	var guard optionalBool
	fs.Var(&guard, "crd-guard", "the CRD guard of fieldwatch run --admission-addr (--crd-guard, warn by default): -o admission-webhook adds its webhook for the updates and deletions of every CRD, "+
		"and the RBAC grants it list on the custom resources discovery (or --crds) shows. Default true with -o admission-webhook, -o helm-values or --admission-certs (an admission install), unless --namespaces")
	guardPolicy := fs.String("crd-guard-failure-policy", "Ignore", "with -o admission-webhook or helm-values: the CRD guard webhook's failurePolicy: Ignore (a CRD change made while no replica answers goes through unchecked) "+
		"or Fail (it is refused until one answers; the apiserver's own upkeep of CRDs is never sent)")
	guardTimeout := fs.Int("crd-guard-timeout-seconds", rbac.DefaultGuardTimeoutSeconds, "with -o admission-webhook or helm-values: the CRD guard webhook's timeoutSeconds (3-30); run fieldwatch with --crd-guard-timeout 2 s below it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if (len(ruleFiles) == 0 && *metricsConfig == "") || fs.NArg() > 0 {
		_, _ = fmt.Fprintln(stderr, "fieldwatch rbac: --rules FILE is required (or --metrics-config FILE) and no arguments are taken")
		return 2
	}
	if *output != "yaml" && *output != "helm-values" && *output != "admission-webhook" {
		_, _ = fmt.Fprintf(stderr, "fieldwatch rbac: -o %q: want yaml, helm-values or admission-webhook\n", *output)
		return 2
	}
	webhook.Port = int32(*port)
	if *certManager != "" {
		webhook.Annotations = map[string]string{"cert-manager.io/inject-ca-from": *certManager}
	}
	if *caBundle != "" {
		b, err := os.ReadFile(*caBundle)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "fieldwatch rbac: --admission-ca-bundle: %v\n", err)
			return 1
		}
		webhook.CABundle = b
	}
	if opts.ReadCRDs && len(opts.Namespaces) == 0 {
		_, _ = fmt.Fprintln(stderr, "fieldwatch rbac: --read-crds goes with --namespaces (a cluster-wide install reads CRDs anyway)")
		return 2
	}
	opts.Namespaces = slices.Compact(slices.Sorted(slices.Values(opts.Namespaces)))
	if !guard.set {
		guard.value = (*output == "admission-webhook" || *output == "helm-values" || opts.AdmissionCerts) && len(opts.Namespaces) == 0
	}
	if *guardPolicy != "Ignore" && *guardPolicy != "Fail" {
		_, _ = fmt.Fprintf(stderr, "fieldwatch rbac: --crd-guard-failure-policy %q: want Ignore or Fail\n", *guardPolicy)
		return 2
	}
	opts.CRDGuard = guard.value
	webhook.CRDGuard = guard.value
	webhook.CRDFailurePolicy = admissionregistrationv1.FailurePolicyType(*guardPolicy)
	webhook.CRDTimeoutSeconds = int32(*guardTimeout)
	set, err := rules.Compile(rules.File{})
	if len(ruleFiles) > 0 {
		set, err = rules.Load(ruleFiles...)
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 1
	}
	ms, err := fieldmetrics.Load(*metricsConfig, ruleFiles...)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, err)
		return 1
	}
	if !ms.Empty() {
		opts.Metrics = ms.Resources()
	}
	if len(crds) > 0 {
		if !*offline {
			_, _ = fmt.Fprintln(stderr, "fieldwatch rbac: --crds goes with --offline (online, the cluster says which CRDs it serves)")
			return 2
		}
		if opts.CRDs, err = rbac.CRDResources(crds...); err != nil {
			_, _ = fmt.Fprintf(stderr, "fieldwatch rbac: --crds: %v\n", err)
			return 1
		}
	}
	if !*offline {
		cfg, err := kube.config()
		if err == nil {
			opts.Resources, _, err = watcher.Discover(ctx, cfg)
		}
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "fieldwatch rbac: cannot discover resources (%v); use --offline to guess them from kinds\n", err)
			return 1
		}
	}
	perms, err := rbac.Compute(set, opts)
	if list := fileerr.List(nil); errors.As(err, &list) {
		_, _ = fmt.Fprintln(stderr, err) // FILE:LINE:COL: ..., one a line
		return 1
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fieldwatch rbac: %v\n", err)
		return 1
	}
	var out []byte
	switch *output {
	case "helm-values":
		out, err = perms.HelmValues(opts)
		if err == nil {
			var adm []byte
			adm, err = rbac.AdmissionHelmValues(set, opts)
			out = append(out, adm...)
		}
		if err == nil && len(opts.Namespaces) == 0 {
			// The chart runs no guard in a namespaced install.
			var g []byte
			g, err = rbac.GuardHelmValues(webhook)
			out = append(out, g...)
		}
	case "admission-webhook":
		out, err = rbac.AdmissionWebhook(set, opts, webhook)
	default:
		out, err = perms.Manifests(opts)
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fieldwatch rbac: %v\n", err)
		return 1
	}
	_, _ = stdout.Write(out)
	return 0
}

// optionalBool is a boolean flag that knows whether it was given, so that
// its default can depend on other flags.
type optionalBool struct{ set, value bool }

func (b *optionalBool) String() string {
	if b == nil || !b.set {
		return ""
	}
	return strconv.FormatBool(b.value)
}

func (b *optionalBool) Set(v string) error {
	x, err := strconv.ParseBool(v)
	if err != nil {
		return err
	}
	b.set, b.value = true, x
	return nil
}

// IsBoolFlag lets the flag be given without a value (--crd-guard).
func (b *optionalBool) IsBoolFlag() bool { return true }
