package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// egressChain is the chain, in the filter and mangle tables, that lets the
// cluster's packets out through loopback and the bridge only.
const egressChain = "FIELDWATCH-EGRESS"

// guardRule is one rule of the egress guard, as `iptables -S` prints it
// (without the -A CHAIN).
type guardRule struct {
	ip6   bool
	table string
	chain string
	spec  string
}

// guardRules are the filter rules that keep the cluster's traffic on the
// machine, installed before anything of the cluster starts and first in
// their chains: any packet from or to the pod range or the Service range,
// or forwarded from the bridge, that would leave through an interface
// other than loopback and the bridge is dropped in the mangle table's
// POSTROUTING and FORWARD (where nothing the cluster runs adds rules: they
// stay first, and POSTROUTING sees every packet's last route) and rejected
// in the filter table's FORWARD and OUTPUT (an error at once rather than a
// timeout; kube-proxy later prepends its jumps there).
// The bridge's CNI configuration does not masquerade, and the pods have
// no default route: these rules are the backstop.
func guardRules() []guardRule {
	var rules []guardRule
	ranges := []string{"-s " + podCIDR, "-d " + podCIDR, "-s " + serviceCIDR, "-d " + serviceCIDR}
	for _, table := range []string{"mangle", "filter"} {
		reject := "-j DROP"
		if table == "filter" {
			reject = "-j REJECT --reject-with icmp-admin-prohibited"
		}
		rules = append(rules,
			guardRule{table: table, chain: egressChain, spec: "-o lo -j RETURN"},
			guardRule{table: table, chain: egressChain, spec: "-o " + bridgeName + " -j RETURN"})
		if table == "filter" {
			// A packet of this machine to a Service's address that
			// kube-proxy sent to a pod still shows the interface of its
			// first route in OUTPUT (the machine's): the mangle table's
			// POSTROUTING, which sees where it goes, judges it.
			rules = append(rules, guardRule{table: table, chain: egressChain, spec: "-m conntrack --ctstate DNAT -j RETURN"})
		}
		rules = append(rules, guardRule{table: table, chain: egressChain, spec: reject})
		jumps := map[string][]string{
			"mangle": {"POSTROUTING", "FORWARD"},
			"filter": {"FORWARD", "OUTPUT"},
		}[table]
		for _, chain := range jumps {
			for _, r := range ranges {
				rules = append(rules, guardRule{table: table, chain: chain, spec: r + " -j " + egressChain})
			}
			if chain == "FORWARD" {
				rules = append(rules, guardRule{table: table, chain: chain, spec: "-i " + bridgeName + " -j " + egressChain})
			}
		}
		// IPv6: the pods have none but link-local addresses; nothing
		// from the bridge is forwarded elsewhere.
		reject6 := "-j DROP"
		if table == "filter" {
			reject6 = "-j REJECT --reject-with icmp6-adm-prohibited"
		}
		rules = append(rules,
			guardRule{ip6: true, table: table, chain: egressChain, spec: "-o " + bridgeName + " -j RETURN"},
			guardRule{ip6: true, table: table, chain: egressChain, spec: reject6},
			guardRule{ip6: true, table: table, chain: "FORWARD", spec: "-i " + bridgeName + " -j " + egressChain})
	}
	return rules
}

func iptablesCmd(ip6 bool) string {
	if ip6 {
		return "ip6tables"
	}
	return "iptables"
}

// installGuard creates the egress chains and inserts the jumps at the top
// of the built-in chains, in order.
func installGuard() error {
	removeGuard() // a cluster that was not taken down cleanly
	pos := map[string]int{}
	for _, r := range guardRules() {
		cmd := iptablesCmd(r.ip6)
		if r.chain == egressChain {
			if pos[cmd+r.table+r.chain] == 0 {
				if err := run(cmd, "-w", "-t", r.table, "-N", egressChain); err != nil {
					return err
				}
			}
			pos[cmd+r.table+r.chain]++
			if err := run(cmd, append([]string{"-w", "-t", r.table, "-A", egressChain}, strings.Fields(r.spec)...)...); err != nil {
				return err
			}
			continue
		}
		pos[cmd+r.table+r.chain]++
		n := fmt.Sprint(pos[cmd+r.table+r.chain])
		if err := run(cmd, append([]string{"-w", "-t", r.table, "-I", r.chain, n}, strings.Fields(r.spec)...)...); err != nil {
			return err
		}
	}
	return nil
}

// listChain returns the rules of a chain as `iptables -S` prints them,
// without "-A CHAIN ".
func listChain(cmd, table, chain string) ([]string, error) {
	out, err := exec.Command(cmd, "-w", "-t", table, "-S", chain).Output()
	if err != nil {
		return nil, fmt.Errorf("%s -t %s -S %s: %w", cmd, table, chain, err)
	}
	var rules []string
	for line := range strings.Lines(string(out)) {
		if rule, ok := strings.CutPrefix(strings.TrimSpace(line), "-A "+chain+" "); ok {
			rules = append(rules, rule)
		}
	}
	return rules, nil
}

// checkGuard reads the rules back: every guard rule is in place, in
// order, and the egress chains hold exactly their rules. The jumps of the
// mangle table, which the cluster's parts leave alone, come first in their
// built-in chains; so do the filter table's when strict (before anything
// started: the kubelet and kube-proxy prepend theirs later, kube-proxy's
// KUBE-FORWARD accepting some packets ahead of them, which the mangle
// table's POSTROUTING still drops when they would leave). It returns what
// is missing or out of place.
func checkGuard(strict bool) error {
	var errs []error
	listed := map[string][]string{}
	want := map[string][]string{}
	first := map[string]bool{}
	for _, r := range guardRules() {
		cmd := iptablesCmd(r.ip6)
		key := cmd + " -t " + r.table + " -S " + r.chain
		if _, ok := listed[key]; !ok {
			rules, err := listChain(cmd, r.table, r.chain)
			if err != nil {
				errs = append(errs, err)
			}
			listed[key] = rules
		}
		want[key] = append(want[key], r.spec)
		first[key] = strict || r.table == "mangle" || r.chain == egressChain
	}
	for key, rules := range want {
		got := listed[key]
		at := slices.Index(got, rules[0])
		if at < 0 || (first[key] && at > 0) || len(got) < at+len(rules) || !slices.Equal(got[at:at+len(rules)], rules) {
			errs = append(errs, fmt.Errorf("%s is %q, want %q in order%s", key, got, rules, map[bool]string{true: ", first"}[first[key]]))
		}
		if strings.HasSuffix(key, egressChain) && len(got) != len(rules) {
			errs = append(errs, fmt.Errorf("%s holds %q, want only %q", key, got, rules))
		}
	}
	return errors.Join(errs...)
}

// removeGuard deletes the jumps and the egress chains.
func removeGuard() {
	for _, r := range guardRules() {
		if r.chain == egressChain {
			continue
		}
		cmd := iptablesCmd(r.ip6)
		for quiet(cmd, append([]string{"-w", "-t", r.table, "-D", r.chain}, strings.Fields(r.spec)...)...) == nil {
		}
	}
	for _, ip6 := range []bool{false, true} {
		for _, table := range []string{"mangle", "filter"} {
			_ = quiet(iptablesCmd(ip6), "-w", "-t", table, "-F", egressChain)
			_ = quiet(iptablesCmd(ip6), "-w", "-t", table, "-X", egressChain)
		}
	}
}

// sweepChains deletes the chains kube-proxy, the kubelet and the CNI
// plugins create (KUBE-*, CNI-*) in every table, with the rules of the
// built-in chains that jump to them.
func sweepChains() {
	for _, ip6 := range []bool{false, true} {
		cmd := iptablesCmd(ip6)
		for _, table := range []string{"filter", "nat", "mangle", "raw"} {
			out, err := exec.Command(cmd, "-w", "-t", table, "-S").Output()
			if err != nil {
				continue
			}
			var chains []string
			for line := range strings.Lines(string(out)) {
				args := splitRule(strings.TrimSpace(line))
				if len(args) == 2 && args[0] == "-N" && ours(args[1]) {
					chains = append(chains, args[1])
				}
				if len(args) > 2 && args[0] == "-A" && !ours(args[1]) && jumpsToOurs(args) {
					_ = quiet(cmd, append([]string{"-w", "-t", table, "-D"}, args[1:]...)...)
				}
			}
			for _, c := range chains {
				_ = quiet(cmd, "-w", "-t", table, "-F", c)
			}
			for _, c := range chains {
				_ = quiet(cmd, "-w", "-t", table, "-X", c)
			}
		}
	}
}

func ours(chain string) bool {
	return strings.HasPrefix(chain, "KUBE-") || strings.HasPrefix(chain, "CNI-")
}

func jumpsToOurs(args []string) bool {
	for i, a := range args[:len(args)-1] {
		if (a == "-j" || a == "-g") && ours(args[i+1]) {
			return true
		}
	}
	return false
}

// splitRule splits a line of `iptables -S` into arguments, keeping the
// double-quoted ones (comments) whole.
func splitRule(line string) []string {
	var args []string
	var cur strings.Builder
	quoted, started := false, false
	for _, r := range line {
		switch {
		case r == '"':
			quoted = !quoted
			started = true
		case r == ' ' && !quoted:
			if started {
				args = append(args, cur.String())
				cur.Reset()
				started = false
			}
		default:
			cur.WriteRune(r)
			started = true
		}
	}
	if started {
		args = append(args, cur.String())
	}
	return args
}

// createBridge creates the bridge with the node's address, before the
// apiserver binds it; IPv6 is off on it.
func createBridge() error {
	if _, err := net.InterfaceByName(bridgeName); err == nil {
		_ = quiet("ip", "link", "del", bridgeName)
	}
	if err := run("ip", "link", "add", bridgeName, "type", "bridge"); err != nil {
		return err
	}
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+bridgeName+"/disable_ipv6", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("disable IPv6 on %s: %w", bridgeName, err)
	}
	ones, _ := mustCIDR(podSubnet).Mask.Size()
	if err := run("ip", "addr", "add", fmt.Sprintf("%s/%d", nodeIP, ones), "dev", bridgeName); err != nil {
		return err
	}
	return run("ip", "link", "set", bridgeName, "up")
}

// deleteBridge deletes the bridge and the pods' veths still on it.
func deleteBridge() {
	out, _ := exec.Command("ip", "-o", "link", "show", "master", bridgeName).Output()
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 1 {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			_ = quiet("ip", "link", "del", name)
		}
	}
	_ = quiet("ip", "link", "del", bridgeName)
}

// checkRoutes fails when the pod or Service range overlaps a route of the
// machine other than the default one (or the bridge's own).
func checkRoutes() error {
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return fmt.Errorf("ip route: %w", err)
	}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "default" || f[0] == "local" || f[0] == "broadcast" || strings.Contains(line, "dev "+bridgeName) {
			continue
		}
		dst := f[0]
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		_, route, err := net.ParseCIDR(dst)
		if err != nil {
			continue
		}
		for _, r := range []string{podCIDR, serviceCIDR} {
			if overlap(route, mustCIDR(r)) {
				return fmt.Errorf("the machine's route %q overlaps the cluster's range %s", strings.TrimSpace(line), r)
			}
		}
	}
	return nil
}

func overlap(a, b *net.IPNet) bool { return a.Contains(b.IP) || b.Contains(a.IP) }

func mustCIDR(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}
