#!/usr/bin/env bash
# build.sh builds the node's parts of the one-node cluster (make cluster)
# into bin/ from the Go module proxy, using the two modules beside this
# script: kubelet, kube-controller-manager, kube-scheduler, kube-proxy and
# kubectl from k8s.io/kubernetes (the release of hack/controlplane's
# kube-apiserver, built with the same flags so that they share its build
# cache), containerd, its runc shim and ctr, and CoreDNS (the cluster
# DNS, with the plugins its Corefile uses). A binary is rebuilt only
# when bin/<name>.version does not name the version its module pins, so a
# second run costs nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$(cd "$here/../.." && pwd)/bin}
mkdir -p "$bin"

# build NAME MODULE_DIR PACKAGE PINNED_MODULE [GO BUILD FLAGS...]
build() {
	local name=$1 dir=$2 pkg=$3 pinned=$4 version stamp
	shift 4
	# The pinned version as go.mod writes it (in a require block, or on a
	# require line of its own): reading it needs no network.
	version="$pinned $(cd "$dir" && go mod edit -print | awk -v m="$pinned" '$1 == m {print $2; exit} $1 == "require" && $2 == m {print $3; exit}')"
	stamp="$bin/$name.version"
	if [[ -x "$bin/$name" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
		echo "cluster: $name ($version) is up to date in $bin"
		return
	fi
	echo "cluster: building $name ($version); the first build takes minutes"
	local start=$SECONDS
	(cd "$dir" && "$here/../quietgo.sh" go build "$@" -o "$bin/$name.tmp" "$pkg")
	mv "$bin/$name.tmp" "$bin/$name"
	echo "$version" >"$stamp"
	echo "cluster: built $name in $((SECONDS - start))s"
}

k8s=$here/kubernetes
for name in kubelet kube-controller-manager kube-scheduler kube-proxy kubectl; do
	build "$name" "$k8s" "k8s.io/kubernetes/cmd/$name" k8s.io/kubernetes
done

# containerd needs no cgo without the btrfs, devmapper and zfs snapshotters.
ctrd=$here/containerd
for name in containerd containerd-shim-runc-v2 ctr; do
	CGO_ENABLED=0 build "$name" "$ctrd" "github.com/containerd/containerd/v2/cmd/$name" \
		github.com/containerd/containerd/v2 -tags "no_btrfs no_devmapper no_zfs"
done

# CoreDNS with the plugins the cluster DNS uses (hack/cluster/coredns).
CGO_ENABLED=0 build coredns "$here/coredns" . github.com/coredns/coredns
