package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// sysctls are the kernel settings the cluster's parts change: the kubelet
// (protectKernelDefaults: false sets the first six), the CNI bridge plugin
// (forwarding) and kube-proxy (route_localnet, conntrack). up records them
// before anything starts; down puts back those that changed.
var sysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward",
	"net/ipv4/conf/all/forwarding",
	"net/ipv4/conf/all/route_localnet",
	"net/ipv6/conf/all/forwarding",
	"net/netfilter/nf_conntrack_max",
	"net/netfilter/nf_conntrack_tcp_timeout_established",
	"net/netfilter/nf_conntrack_tcp_timeout_close_wait",
	"net/bridge/bridge-nf-call-iptables",
	"net/bridge/bridge-nf-call-ip6tables",
}

// recordSysctls writes the current values into sysctlRecord, unless a
// record is already there (from a cluster not taken down: its values are
// the machine's).
func recordSysctls() error {
	if _, err := os.Stat(sysctlRecord); err == nil {
		return nil
	}
	var b strings.Builder
	for _, name := range sysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", name))
		if err != nil {
			continue // not on this kernel
		}
		fmt.Fprintf(&b, "%s=%s\n", name, strings.TrimSpace(string(v)))
	}
	return os.WriteFile(sysctlRecord, []byte(b.String()), 0o644)
}

// restoreSysctls writes back the recorded values that changed and removes
// the record.
func restoreSysctls() error {
	data, err := os.ReadFile(sysctlRecord)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for line := range strings.Lines(string(data)) {
		name, want, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		path := filepath.Join("/proc/sys", name)
		got, err := os.ReadFile(path)
		if err != nil || strings.TrimSpace(string(got)) == want {
			continue
		}
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore %s=%s: %w", name, want, err))
			continue
		}
		fmt.Printf("cluster: restored %s to %s (was %s)\n", strings.ReplaceAll(name, "/", "."), want, strings.TrimSpace(string(got)))
	}
	if len(errs) == 0 {
		_ = os.Remove(sysctlRecord)
	}
	return errors.Join(errs...)
}
