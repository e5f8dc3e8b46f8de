#!/usr/bin/env bash
# build.sh builds the local control plane (kube-apiserver and etcd) into bin/
# from the Go module proxy, using the two modules beside this script. A binary
# is rebuilt only when bin/<name>.version does not name the version its
# module pins, so a second run costs nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$(cd "$here/../.." && pwd)/bin}
mkdir -p "$bin"

# build NAME MODULE_DIR PACKAGE PINNED_MODULE ABOUT
build() {
	local name=$1 dir=$2 pkg=$3 pinned=$4 about=$5 version stamp
	# The pinned version as go.mod writes it: reading it needs no network.
	version="$pinned $(cd "$dir" && go mod edit -print | awk -v m="$pinned" '$1 == m {print $2; exit}')"
	stamp="$bin/$name.version"
	if [[ -x "$bin/$name" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
		echo "controlplane: $name ($version) is up to date in $bin"
		return
	fi
	echo "controlplane: building $name ($version) from the Go module proxy into $bin, once: $about"
	local start=$SECONDS
	(cd "$dir" && "$here/../quietgo.sh" go build -o "$bin/$name.tmp" "$pkg")
	mv "$bin/$name.tmp" "$bin/$name"
	echo "$version" >"$stamp"
	echo "controlplane: built $name in $((SECONDS - start))s"
}

build kube-apiserver "$here/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes \
	"most of the 12 minutes a first run takes on 2 cores (up to 250 modules to download, then a large compile)"
build etcd "$here/etcd" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3 \
	"a few minutes more"
