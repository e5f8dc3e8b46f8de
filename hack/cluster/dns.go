package main

import (
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// clusterDomain is the cluster's DNS domain (the kubelet's clusterDomain):
// the cluster DNS answers for it alone.
const clusterDomain = "cluster.local"

// sliceByService indexes EndpointSlices by namespace/Service name (their
// kubernetes.io/service-name label).
const sliceByService = "service"

// dnsRecords finds the addresses of the cluster's names in the informers'
// caches of Services and EndpointSlices, as the cluster DNS of the
// Kubernetes DNS specification does, in part:
//
//	SVC.NS.svc.cluster.local        a Service's ClusterIPs; a headless one's ready endpoints
//	HOST.SVC.NS.svc.cluster.local   the ready endpoints of headless Service SVC with hostname HOST
//	                                (a StatefulSet's pods, whose subdomain is SVC)
//
// An endpoint counts when it is ready, or when its Service publishes the
// addresses of endpoints that are not (publishNotReadyAddresses). Every
// other name of cluster.local does not exist; an ExternalName Service's
// name exists without addresses.
type dnsRecords struct {
	services cache.Indexer
	slices   cache.Indexer
}

// newDNSRecords registers the Service and EndpointSlice informers of f;
// start f and wait for their caches before looking names up.
func newDNSRecords(f informers.SharedInformerFactory) (*dnsRecords, error) {
	services := f.Core().V1().Services().Informer()
	slicesInf := f.Discovery().V1().EndpointSlices().Informer()
	if err := slicesInf.AddIndexers(cache.Indexers{sliceByService: func(obj any) ([]string, error) {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || s.Labels[discoveryv1.LabelServiceName] == "" {
			return nil, nil
		}
		return []string{s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]}, nil
	}}); err != nil {
		return nil, err
	}
	return &dnsRecords{services: services.GetIndexer(), slices: slicesInf.GetIndexer()}, nil
}

// lookup returns the addresses of name (lower case, absolute or not) of
// the family v6 (AAAA) or IPv4 (A), and whether the name exists at all.
func (r *dnsRecords) lookup(name string, v6 bool) ([]netip.Addr, bool) {
	labels, ok := serviceLabels(name)
	if !ok {
		return nil, false
	}
	var host string
	if len(labels) == 3 {
		host, labels = labels[0], labels[1:]
	}
	svc := r.service(labels[1], labels[0])
	if svc == nil {
		return nil, false
	}
	var addrs []netip.Addr
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return nil, host == ""
	case svc.Spec.ClusterIP != corev1.ClusterIPNone && svc.Spec.ClusterIP != "":
		if host != "" {
			return nil, false
		}
		for _, ip := range svc.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				addrs = append(addrs, a)
			}
		}
	default:
		var found bool
		addrs, found = r.endpoints(svc, host)
		if !found {
			return nil, false
		}
	}
	return family(addrs, v6), true
}

// serviceLabels splits NAME.svc.cluster.local into NAME's labels when
// there are two (SVC, NS) or three (HOST, SVC, NS).
func serviceLabels(name string) ([]string, bool) {
	rest, ok := strings.CutSuffix(strings.TrimSuffix(name, "."), ".svc."+clusterDomain)
	if !ok {
		return nil, false
	}
	labels := strings.Split(rest, ".")
	if len(labels) < 2 || len(labels) > 3 || slices.Contains(labels, "") {
		return nil, false
	}
	return labels, true
}

func (r *dnsRecords) service(ns, name string) *corev1.Service {
	obj, ok, err := r.services.GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return nil
	}
	svc, _ := obj.(*corev1.Service)
	return svc
}

// endpoints returns the addresses of headless Service svc's endpoints
// that count (with hostname host when it is not empty), each once, and
// whether host names one. The name of a headless Service exists with no
// endpoint.
func (r *dnsRecords) endpoints(svc *corev1.Service, host string) ([]netip.Addr, bool) {
	objs, err := r.slices.ByIndex(sliceByService, svc.Namespace+"/"+svc.Name)
	if err != nil {
		return nil, false
	}
	var addrs []netip.Addr
	found := host == ""
	for _, obj := range objs {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		for _, ep := range s.Endpoints {
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready || svc.Spec.PublishNotReadyAddresses
			if !ready || (host != "" && (ep.Hostname == nil || *ep.Hostname != host)) {
				continue
			}
			found = true
			for _, ip := range ep.Addresses {
				if a, err := netip.ParseAddr(ip); err == nil {
					addrs = append(addrs, a)
				}
			}
		}
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	return slices.Compact(addrs), found
}

// family keeps the IPv6 addresses of addrs when v6, else the IPv4 ones.
func family(addrs []netip.Addr, v6 bool) []netip.Addr {
	var kept []netip.Addr
	for _, a := range addrs {
		if a.Unmap().Is6() == v6 {
			kept = append(kept, a.Unmap())
		}
	}
	return kept
}
