#!/usr/bin/env bash
# build.sh builds the local control plane (kube-apiserver and etcd) into bin/
# from the Go module proxy, using the two modules beside this script. A binary
# is rebuilt only when bin/<name>.version does not name the version its
# module pins, so a second run costs nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$(cd "$here/../.." && pwd)/bin}
mkdir -p "$bin"

# build NAME MODULE_DIR PACKAGE PINNED_MODULE
build() {
	local name=$1 dir=$2 pkg=$3 pinned=$4 version stamp
	version="$pinned $(cd "$dir" && go list -m -f '{{.Version}}' "$pinned")"
	stamp="$bin/$name.version"
	if [[ -x "$bin/$name" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
		echo "controlplane: $name ($version) is up to date in $bin"
		return
	fi
	echo "controlplane: building $name ($version); the first build takes minutes"
	local start=$SECONDS
	(cd "$dir" && go build -o "$bin/$name.tmp" "$pkg")
	mv "$bin/$name.tmp" "$bin/$name"
	echo "$version" >"$stamp"
	echo "controlplane: built $name in $((SECONDS - start))s"
}

build kube-apiserver "$here/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes
build etcd "$here/etcd" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3
