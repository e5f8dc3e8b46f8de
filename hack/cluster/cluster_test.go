package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestSplitRule(t *testing.T) {
	tests := []struct {
		line string
		want []string
	}{
		{"-A FORWARD -j KUBE-FORWARD", []string{"-A", "FORWARD", "-j", "KUBE-FORWARD"}},
		{`-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD`,
			[]string{"-A", "FORWARD", "-m", "comment", "--comment", "kubernetes forwarding rules", "-j", "KUBE-FORWARD"}},
		{`-N KUBE-SERVICES`, []string{"-N", "KUBE-SERVICES"}},
		{`-A X -m comment --comment ""`, []string{"-A", "X", "-m", "comment", "--comment", ""}},
	}
	for _, tt := range tests {
		if got := splitRule(tt.line); !slices.Equal(got, tt.want) {
			t.Errorf("splitRule(%q) = %q, want %q", tt.line, got, tt.want)
		}
	}
}

func TestJumpsToOurs(t *testing.T) {
	for rule, want := range map[string]bool{
		"-A FORWARD -j KUBE-FORWARD":                       true,
		"-A POSTROUTING -g CNI-HOSTPORT-MASQ":              true,
		"-A FORWARD -s 10.244.0.0/16 -j FIELDWATCH-EGRESS": false,
		"-A INPUT -j ACCEPT":                               false,
	} {
		if got := jumpsToOurs(splitRule(rule)); got != want {
			t.Errorf("jumpsToOurs(%q) = %v, want %v", rule, got, want)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/var/lib/fieldwatch-cluster/kubelet`: "/var/lib/fieldwatch-cluster/kubelet",
		`/run/fieldwatch-cluster/a\040b`:      "/run/fieldwatch-cluster/a b",
		`/run/x\011y\134z`:                    "/run/x\ty\\z",
		`/trailing\04`:                        `/trailing\04`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestGuardRules: every packet of the pod and Service ranges, and every
// one forwarded from the bridge, goes through the egress chain, which lets
// out only through loopback and the bridge and ends in a drop (mangle) or
// a reject (filter), in both address families.
func TestGuardRules(t *testing.T) {
	chains := map[string][]string{}
	for _, r := range guardRules() {
		key := iptablesCmd(r.ip6) + " " + r.table + " " + r.chain
		chains[key] = append(chains[key], r.spec)
	}
	for _, table := range []string{"mangle", "filter"} {
		for _, cmd := range []string{"iptables", "ip6tables"} {
			egress := chains[cmd+" "+table+" "+egressChain]
			last := egress[len(egress)-1]
			if (table == "mangle" && last != "-j DROP") || (table == "filter" && !strings.HasPrefix(last, "-j REJECT")) {
				t.Errorf("%s %s: %s ends with %q", cmd, table, egressChain, last)
			}
			for _, r := range egress[:len(egress)-1] {
				allowed := strings.HasPrefix(r, "-o lo ") || strings.HasPrefix(r, "-o "+bridgeName+" ") ||
					(table == "filter" && r == "-m conntrack --ctstate DNAT -j RETURN")
				if !strings.HasSuffix(r, "-j RETURN") || !allowed {
					t.Errorf("%s %s: %s lets out %q", cmd, table, egressChain, r)
				}
			}
		}
	}
	for _, key := range []string{"iptables mangle POSTROUTING", "iptables filter FORWARD", "iptables filter OUTPUT"} {
		for _, r := range []string{"-s " + podCIDR, "-d " + podCIDR, "-s " + serviceCIDR, "-d " + serviceCIDR} {
			if !slices.Contains(chains[key], r+" -j "+egressChain) {
				t.Errorf("%s does not send %s to %s", key, r, egressChain)
			}
		}
	}
	for _, key := range []string{"iptables mangle FORWARD", "iptables filter FORWARD", "ip6tables mangle FORWARD", "ip6tables filter FORWARD"} {
		if !slices.Contains(chains[key], "-i "+bridgeName+" -j "+egressChain) {
			t.Errorf("%s does not send what comes from %s to %s", key, bridgeName, egressChain)
		}
	}
}

// TestCNIConfig: the pods' network neither masquerades nor gives them a
// default route.
func TestCNIConfig(t *testing.T) {
	var conf struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(cniConfig()), &conf); err != nil {
		t.Fatal(err)
	}
	if len(conf.Plugins) != 1 {
		t.Fatalf("%d plugins", len(conf.Plugins))
	}
	p := conf.Plugins[0]
	if p["type"] != "bridge" || p["bridge"] != bridgeName || p["ipMasq"] != false || p["isDefaultGateway"] != false {
		t.Errorf("bridge plugin %v", p)
	}
	routes := p["ipam"].(map[string]any)["routes"].([]any)
	if len(routes) != 1 || routes[0].(map[string]any)["dst"] != serviceCIDR {
		t.Errorf("routes %v, want the Service range only", routes)
	}
}

// TestCorefile: the cluster DNS binds the address it is given in every
// server block, answers cluster.local from the kubernetes plugin as the
// kubeconfig's user, and forwards nothing (every other name is
// NXDOMAIN).
func TestCorefile(t *testing.T) {
	conf := corefile(nodeIP, "53", "/run/dns.kubeconfig")
	var blocks []string
	for _, line := range strings.Split(conf, "\n") {
		if strings.HasSuffix(line, "{") && !strings.HasPrefix(line, " ") {
			blocks = append(blocks, strings.TrimSuffix(line, " {"))
		}
	}
	if !slices.Equal(blocks, []string{"cluster.local:53", ".:53"}) {
		t.Errorf("server blocks %q, want cluster.local:53 and .:53", blocks)
	}
	for _, want := range []string{"kubeconfig /run/dns.kubeconfig", "kubernetes cluster.local {", "rcode NXDOMAIN"} {
		if !strings.Contains(conf, want) {
			t.Errorf("the Corefile has no %q:\n%s", want, conf)
		}
	}
	if n := strings.Count(conf, "bind "+nodeIP+"\n"); n != len(blocks) {
		t.Errorf("%d server blocks bind %s, want all %d:\n%s", n, nodeIP, len(blocks), conf)
	}
	for _, plugin := range []string{"forward", "proxy", "grpc"} {
		if strings.Contains(conf, plugin) {
			t.Errorf("the Corefile uses %s: no query may leave the machine:\n%s", plugin, conf)
		}
	}
}
