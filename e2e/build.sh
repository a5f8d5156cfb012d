#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager and kube-scheduler from the Go modules pinned in
# e2e/k8s/go.mod into a cache directory outside git, once: the directory is named after the pinned
# Kubernetes version and a hash of go.mod/go.sum, so a changed pin builds anew and an unchanged one is reused.
# Prints the directory on stdout (the last line); progress and timing go to stderr.
set -euo pipefail
cd "$(dirname "$0")/k8s"

command -v go >/dev/null || {
  echo "make e2e needs Go >= 1.26 on PATH (the control plane is built from k8s.io/kubernetes); none found" >&2
  exit 2
}
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if [ "${go_minor:-0}" -lt 26 ]; then
  echo "make e2e needs Go >= 1.26; found $(go env GOVERSION)" >&2
  exit 2
fi

version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
pin=$(cat go.mod go.sum | sha256sum | cut -c1-12)
out="${E2E_CACHE:-$(cd ../.. && pwd)/.cache}/k8s-${version}-${pin}"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler)

complete=1
for b in "${binaries[@]}"; do [ -x "$out/$b" ] || complete=0; done
if [ "$complete" = 1 ]; then
  echo "e2e: reusing $out" >&2
  echo "$out"
  exit 0
fi

echo "e2e: building ${binaries[*]} (Kubernetes $version) into $out; a cold build takes about 12 minutes on 2 cores" >&2
start=$(date +%s)
mkdir -p "$out.partial"
# The version the components report (and derive their default feature gates' emulation version from).
minor=$(echo "$version" | cut -d. -f2)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
# One invocation, so the packages the four share compile once.
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out.partial/" \
  go.etcd.io/etcd/server/v3 \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler
# go names a binary after the last path element that is not a major version: etcd's is "server".
mv "$out.partial/server" "$out.partial/etcd"
rm -rf "$out" && mv "$out.partial" "$out"
echo "e2e: built in $(( $(date +%s) - start )) s" >&2
echo "$out"
