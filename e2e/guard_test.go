//go:build e2e

package e2e

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The cluster's network, as make cluster sets it up (hack/cluster).
const (
	bridge      = "fieldwatch0"
	nodeIP      = "10.244.0.1"
	podCIDR     = "10.244.0.0/16"
	serviceCIDR = "10.96.0.0/12"
	guardChain  = "FIELDWATCH-EGRESS"
	clusterRun  = "/run/fieldwatch-cluster" // its PID files, CNI and registry configuration
)

// guardReport is the machine's packet filter as read back, with the pods
// that ran then.
type guardReport struct {
	at    time.Time
	rules map[string][]string // "iptables -t TABLE" -> the rules, as -S prints them
	pods  []string            // namespace/name of every pod at the time
	err   error
}

// readGuard reads the filter and mangle rules of both address families and
// lists the cluster's pods.
func readGuard(c *cluster) guardReport {
	r := guardReport{at: time.Now(), rules: map[string][]string{}}
	pods, err := c.cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		r.err = err
		return r
	}
	for _, p := range pods.Items {
		r.pods = append(r.pods, p.Namespace+"/"+p.Name)
	}
	for _, cmd := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "mangle"} {
			out, err := exec.Command(cmd, "-w", "-t", table, "-S").Output()
			if err != nil {
				r.err = fmt.Errorf("%s -t %s -S: %w", cmd, table, err)
				return r
			}
			r.rules[cmd+" -t "+table] = strings.Split(strings.TrimSpace(string(out)), "\n")
		}
	}
	return r
}

// chain returns the rules of chain in a table, without "-A CHAIN ".
func (r guardReport) chain(table, chain string) []string {
	var rules []string
	for _, line := range r.rules[table] {
		if rule, ok := strings.CutPrefix(line, "-A "+chain+" "); ok {
			rules = append(rules, rule)
		}
	}
	return rules
}

// machineInterface is the interface of the machine's default route.
func machineInterface(t testing.TB) string {
	t.Helper()
	f := strings.Fields(run(t, "ip", "-4", "route", "show", "default"))
	if i := slices.Index(f, "dev"); i >= 0 && i+1 < len(f) {
		return f[i+1]
	}
	t.Fatalf("no default route: %v", f)
	return ""
}

// testNetworkGuard checks, from the rules read back before the first pod
// of this run started, that no packet of the pod or Service range, nor
// one forwarded from the bridge, can leave through the machine's
// interface; that the pods' network neither masquerades nor has a default
// route; that no registry can be reached; and that every socket the
// cluster's processes listen on (TCP and UDP) is on loopback or the
// bridge, the cluster DNS's on the bridge's port 53.
func testNetworkGuard(t *testing.T) {
	g := guardAtStart
	if g.err != nil {
		t.Fatalf("reading the rules back: %v", g.err)
	}
	for _, p := range g.pods {
		if strings.HasPrefix(p, namespace+"/") || strings.HasPrefix(p, "e2e-") {
			t.Errorf("pod %s ran when the rules were read: they must be read before the first pod starts", p)
		}
	}
	t.Logf("rules read back at %s, with %d pods in the cluster", g.at.Format(time.TimeOnly), len(g.pods))
	eth := machineInterface(t)
	ranges := []string{"-s " + podCIDR, "-d " + podCIDR, "-s " + serviceCIDR, "-d " + serviceCIDR}

	for _, tc := range []struct {
		table, verdict string
		chains         []string
		ip6            bool
	}{
		{"iptables -t mangle", "DROP", []string{"POSTROUTING", "FORWARD"}, false},
		{"iptables -t filter", "REJECT", []string{"FORWARD", "OUTPUT"}, false},
		{"ip6tables -t mangle", "DROP", []string{"FORWARD"}, true},
		{"ip6tables -t filter", "REJECT", []string{"FORWARD"}, true},
	} {
		// The chain lets packets out through loopback and the bridge
		// only, and stops every other.
		egress := g.chain(tc.table, guardChain)
		if len(egress) == 0 || !strings.HasPrefix(egress[len(egress)-1], "-j "+tc.verdict) {
			t.Errorf("%s: %s = %q: does not end in %s", tc.table, guardChain, egress, tc.verdict)
			continue
		}
		for _, rule := range egress[:len(egress)-1] {
			f := strings.Fields(rule)
			// In the filter table's OUTPUT a packet kube-proxy sent to a
			// pod still shows its first route's interface: the mangle
			// table's POSTROUTING judges it by its last.
			if tc.verdict == "REJECT" && rule == "-m conntrack --ctstate DNAT -j RETURN" {
				continue
			}
			if len(f) != 4 || f[0] != "-o" || (f[1] != "lo" && f[1] != bridge) || f[3] != "RETURN" {
				t.Errorf("%s: %s lets out more than loopback and %s: %q", tc.table, guardChain, bridge, rule)
			}
			if slices.Contains(f, eth) {
				t.Errorf("%s: %s lets packets out through %s, the machine's interface", tc.table, guardChain, eth)
			}
		}
		// The built-in chains send the cluster's packets to it: in the
		// mangle table before any other rule (nothing the cluster runs
		// adds rules there), so that POSTROUTING drops whatever would
		// leave; in the filter table after the jumps kube-proxy and the
		// kubelet prepend to KUBE- chains.
		for _, chain := range tc.chains {
			rules := g.chain(tc.table, chain)
			var want []string
			if !tc.ip6 {
				for _, r := range ranges {
					want = append(want, r+" -j "+guardChain)
				}
			}
			if chain == "FORWARD" {
				want = append(want, "-i "+bridge+" -j "+guardChain)
			}
			i := slices.Index(rules, want[0])
			if i < 0 || len(rules) < i+len(want) || !slices.Equal(rules[i:i+len(want)], want) {
				t.Errorf("%s: %s is %q, want %q in order", tc.table, chain, rules, want)
				continue
			}
			for _, ahead := range rules[:i] {
				f := strings.Fields(ahead)
				if tc.verdict == "DROP" || !strings.HasPrefix(f[len(f)-1], "KUBE-") {
					t.Errorf("%s: %s: %q comes before the guard", tc.table, chain, ahead)
				}
			}
		}
	}

	// The pods' network: no masquerading, no default route.
	confs, _ := filepath.Glob(filepath.Join(clusterRun, "cni", "*.conflist"))
	if len(confs) != 1 {
		t.Fatalf("CNI configurations %v, want one", confs)
	}
	var conf struct {
		Plugins []struct {
			Type, Bridge     string
			IPMasq           bool `json:"ipMasq"`
			IsDefaultGateway bool `json:"isDefaultGateway"`
			IPAM             struct {
				Routes []struct{ Dst string } `json:"routes"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	data, err := os.ReadFile(confs[0])
	if err != nil || json.Unmarshal(data, &conf) != nil || len(conf.Plugins) == 0 {
		t.Fatalf("%s: %v", confs[0], err)
	}
	for _, p := range conf.Plugins {
		if p.Type != "bridge" || p.Bridge != bridge || p.IPMasq || p.IsDefaultGateway {
			t.Errorf("CNI plugin %+v: want the bridge %s, without masquerading or a default gateway", p, bridge)
		}
		for _, r := range p.IPAM.Routes {
			if r.Dst != serviceCIDR {
				t.Errorf("CNI route to %s: the pods need the Service range only", r.Dst)
			}
		}
	}
	hosts, err := os.ReadFile(filepath.Join(clusterRun, "registry-hosts", "_default", "hosts.toml"))
	if err != nil || !strings.Contains(string(hosts), `server = "https://127.0.0.1:1"`) {
		t.Errorf("containerd's default registry host is not the closed loopback port: %s %v", hosts, err)
	}

	// What the cluster's processes listen on.
	listening := listenAddrs(t)
	if len(listening) == 0 {
		t.Fatal("found no socket the cluster's processes listen on")
	}
	for sock, who := range listening {
		_, addr, _ := strings.Cut(sock, " ")
		host, _, _ := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); ip == nil || (!ip.IsLoopback() && ip.String() != nodeIP) {
			t.Errorf("%s listens on %s: only loopback and %s (the bridge) are allowed", who, sock, nodeIP)
		}
	}
	// The cluster DNS, the pods' name server (the kubelet's clusterDNS),
	// on the bridge's address alone.
	for _, sock := range []string{"udp " + nodeIP + ":53", "tcp " + nodeIP + ":53"} {
		if listening[sock] != "dns" {
			t.Errorf("the cluster DNS does not listen on %s", sock)
		}
	}
	t.Logf("listening: %v", listening)
}

// listenAddrs returns the sockets the cluster's processes (their recorded
// PIDs) listen on, TCP ones listening and UDP ones bound and unconnected,
// as "tcp ADDR" or "udp ADDR", each with the process's name.
func listenAddrs(t testing.TB) map[string]string {
	t.Helper()
	owner := map[string]string{} // socket inode -> process
	pidFiles, _ := filepath.Glob(filepath.Join(clusterRun, "pids", "*.pid"))
	for _, f := range pidFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid := strings.Fields(string(data))[0]
		fds, _ := os.ReadDir(filepath.Join("/proc", pid, "fd"))
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join("/proc", pid, "fd", fd.Name()))
			if inode, ok := strings.CutPrefix(link, "socket:["); ok && err == nil {
				owner[strings.TrimSuffix(inode, "]")] = strings.TrimSuffix(filepath.Base(f), ".pid")
			}
		}
	}
	addrs := map[string]string{}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6", "/proc/net/udp", "/proc/net/udp6"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		proto := strings.TrimSuffix(filepath.Base(file), "6")
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			// TCP: LISTEN (0A); UDP: bound, unconnected (07, and no
			// remote address).
			if len(f) < 10 || (proto == "tcp" && f[3] != "0A") || (proto == "udp" && (f[3] != "07" || !strings.HasSuffix(f[2], ":0000"))) {
				continue
			}
			if who, ok := owner[f[9]]; ok {
				addrs[proto+" "+procAddr(f[1])] = who
			}
		}
	}
	return addrs
}

// procAddr decodes an address of /proc/net/tcp{,6}: hex IP (in host byte
// order per 32-bit word) and port.
func procAddr(s string) string {
	h, p, _ := strings.Cut(s, ":")
	raw, _ := hex.DecodeString(h)
	for i := 0; i+4 <= len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, _ := strconv.ParseUint(p, 16, 16)
	return net.JoinHostPort(net.IP(raw).String(), strconv.FormatUint(port, 10))
}
