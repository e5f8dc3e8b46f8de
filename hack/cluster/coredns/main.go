// Command coredns is CoreDNS with the plugins the one-node cluster's DNS
// uses (make cluster): bind, errors, kubernetes and template, in CoreDNS's
// own order of execution. build.sh builds it into bin/coredns from the Go
// module proxy, as the node's other parts are built; its Corefile is
// written by fieldwatch-cluster up (hack/cluster/config.go).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/template"
)

// directives are the plugins compiled in, in the order of CoreDNS's
// plugin.cfg (core/dnsserver/zdirectives.go), which is the order a query
// passes them in.
var directives = []string{"bind", "errors", "template", "kubernetes"}

func main() {
	dnsserver.Directives = directives
	coremain.Run()
}
