package examples_test

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// readyPods is what README.md's jq line computes from a payload: the
// Service and the ready pods it routes to (from the slice before the
// change when it was deleted, with no pods).
func readyPods(p payload) (service string, pods []string) {
	obj := p.object()
	if obj == nil {
		obj = p.oldObject()
	}
	meta, _ := obj["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	service, _ = labels["kubernetes.io/service-name"].(string)
	if p.Object == nil {
		return service, []string{}
	}
	eps, _ := p.object()["endpoints"].([]any)
	pods = []string{}
	for _, e := range eps {
		ep, _ := e.(map[string]any)
		cond, _ := ep["conditions"].(map[string]any)
		ref, _ := ep["targetRef"].(map[string]any)
		if ready, ok := cond["ready"].(bool); ok && !ready {
			continue
		}
		if name, ok := ref["name"].(string); ok {
			pods = append(pods, name)
		}
	}
	return service, pods
}

// TestServiceLookup runs examples/service-lookup while EndpointSlices of a
// Service change the way the EndpointSlice controller changes them (there
// is none on the test control plane): pods come, turn unready, go, and the
// Service goes; a port change and a slice of no Service stay quiet.
func TestServiceLookup(t *testing.T) {
	env := testenv.Shared(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	const ns = "service-lookup-test"
	ensureNamespace(t, ns)
	fw := startFieldwatch(t, "service-lookup/rules.yaml")
	eps := cs.DiscoveryV1().EndpointSlices(ns)

	endpoint := func(pod, ip string, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod},
		}
	}
	port, proto := int32(8080), corev1.ProtocolTCP
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-abc12", Namespace: ns, Labels: map[string]string{
			"kubernetes.io/service-name":             "web",
			"endpointslice.kubernetes.io/managed-by": "fieldwatch-test",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}},
		Endpoints:   []discoveryv1.Endpoint{endpoint("web-a", "10.0.1.1", true), endpoint("web-b", "10.0.1.2", true)},
	}
	var rvs []string
	write := func(what string, do func() (*discoveryv1.EndpointSlice, error)) {
		t.Helper()
		fw.step(t, what, func() error {
			s, err := do()
			if err == nil {
				slice = s
				rvs = append(rvs, s.ResourceVersion)
			}
			return err
		})
	}
	update := func(what string, change func(s *discoveryv1.EndpointSlice)) {
		t.Helper()
		write(what, func() (*discoveryv1.EndpointSlice, error) {
			s := slice.DeepCopy()
			change(s)
			return eps.Update(ctx, s, metav1.UpdateOptions{})
		})
	}

	write("the Service gets pods a and b", func() (*discoveryv1.EndpointSlice, error) {
		return eps.Create(ctx, slice, metav1.CreateOptions{})
	})
	update("pod c added", func(s *discoveryv1.EndpointSlice) {
		s.Endpoints = append(s.Endpoints, endpoint("web-c", "10.0.1.3", true))
	})
	update("pod b unready", func(s *discoveryv1.EndpointSlice) {
		s.Endpoints[1] = endpoint("web-b", "10.0.1.2", false)
	})
	update("the port changes: quiet", func(s *discoveryv1.EndpointSlice) {
		p := int32(8081)
		s.Ports[0].Port = &p
	})
	update("pod a goes", func(s *discoveryv1.EndpointSlice) {
		s.Endpoints = s.Endpoints[1:]
	})

	// A slice of no Service (no kubernetes.io/service-name label): quiet.
	other := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "mesh-1", Namespace: ns, Labels: map[string]string{"endpointslice.kubernetes.io/managed-by": "mesh.example.com"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{endpoint("web-a", "10.0.1.1", true)},
	}
	fw.step(t, "a slice of no Service", func() error {
		_, err := eps.Create(ctx, other, metav1.CreateOptions{})
		return err
	})

	fw.step(t, "the Service goes", func() error {
		return eps.Delete(ctx, slice.Name, metav1.DeleteOptions{})
	})
	waitFor(t, "the deletion is reported", func() (bool, string) {
		ps := fw.firings(t, "service-endpoints", ns, slice.Name)
		return len(ps) > 0 && ps[len(ps)-1].Type == "deleted", fw.stdout.String()
	})

	ps := fw.firings(t, "service-endpoints", ns, slice.Name)
	type step struct {
		typ, rv string
		pods    []string
	}
	var got []step
	for _, p := range ps {
		service, pods := readyPods(p)
		if service != "web" {
			t.Errorf("%s: service %q, want web", p.ID, service)
		}
		got = append(got, step{string(p.Type), p.ResourceVersion, pods})
	}
	// The port change (rvs[3]) fired nothing: the firing after it shows
	// it, as the rule's log writes in order.
	want := []step{
		{"created", rvs[0], []string{"web-a", "web-b"}},
		{"updated", rvs[1], []string{"web-a", "web-b", "web-c"}},
		{"updated", rvs[2], []string{"web-a", "web-c"}},
		{"updated", rvs[4], []string{"web-c"}}, // web-b is still unready
		{"deleted", "", []string{}},            // the resource version of the deletion
	}
	if !slices.EqualFunc(got, want, func(a, b step) bool {
		return a.typ == b.typ && (a.rv == b.rv || b.rv == "") && slices.Equal(a.pods, b.pods)
	}) {
		t.Errorf("firings (type, resourceVersion, ready pods):\n got %v\nwant %v", got, want)
	}
	if len(ps) == len(want) {
		checkChanges(t, ps[2], `[{"op":"replace","path":"/endpoints/1/conditions/ready","value":false,"oldValue":true}]`)
		if ps[1].OldObject == nil || ps[4].OldObject == nil || ps[4].Object != nil {
			t.Errorf("includeObject: an update carries object and oldObject, a deletion oldObject only:\n%s\n%s", ps[1].raw, ps[4].raw)
		}
	}
	for _, p := range fw.payloads(t) {
		if p.Name == other.Name {
			t.Errorf("a slice of no Service fired: %s", p.raw)
		}
	}
}
