#!/usr/bin/env bash
# Builds the control-plane binaries that envtest needs (kube-apiserver and etcd)
# from the Go module proxy, and caches them outside the repository.
#
# Usage: hack/envtest-bins.sh        prints the directory that holds the binaries
#
# The binaries cannot be downloaded on every machine we work on, so we build them:
#   - kube-apiserver from k8s.io/kubernetes, with every k8s.io staging module
#     replaced by its published v0.x release (the list comes from kubernetes' own
#     go.mod replace block);
#   - etcd from go.etcd.io/etcd/server/v3's etcdmain.
# A cold build takes about 8 minutes on 2 cores; later calls return at once.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.7.3}"
CACHE="${AGENTRUN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrun}"
BIN="$CACHE/envtest/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}"
EXTRA_CMDS="${EXTRA_CMDS:-}"   # e.g. "kubelet kube-controller-manager kube-scheduler kubectl" for e2e

log() { echo "envtest-bins: $*" >&2; }

staging_version="v0.${K8S_VERSION#v1.}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"

build_kube() {
  local cmds=("$@") src="$CACHE/src/kubernetes-${K8S_VERSION}"
  mkdir -p "$src" "$BIN"
  if [ ! -f "$src/go.sum" ]; then
    log "preparing a module that requires k8s.io/kubernetes ${K8S_VERSION}"
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
    {
      echo "module agentrun.dev/envtest-bins"
      echo
      echo "go 1.26"
      echo
      echo "require k8s.io/kubernetes ${K8S_VERSION}"
      echo
      echo "replace ("
      sed -n '/^replace (/,/^)/p' "$gomod" | grep -E '^\s+k8s.io/' | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
      echo ")"
    } > "$src/go.mod"
    printf 'package tools\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver/app"\n' > "$src/tools.go"
    (cd "$src" && GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || GOFLAGS=-mod=mod go mod download)
  fi
  for c in "${cmds[@]}"; do
    [ -x "$BIN/$c" ] && continue
    log "building $c ${K8S_VERSION} (several minutes on a cold cache)"
    (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$BIN/$c.tmp" "k8s.io/kubernetes/cmd/$c")
    mv "$BIN/$c.tmp" "$BIN/$c"
  done
}

build_etcd() {
  local src="$CACHE/src/etcd-${ETCD_VERSION}"
  [ -x "$BIN/etcd" ] && return
  mkdir -p "$src" "$BIN"
  cat > "$src/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  if [ ! -f "$src/go.mod" ]; then
    (cd "$src" && go mod init agentrun.dev/etcd-bin >/dev/null 2>&1 && go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >/dev/null 2>&1 && go mod tidy >/dev/null 2>&1)
  fi
  log "building etcd ${ETCD_VERSION}"
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" .)
  mv "$BIN/etcd.tmp" "$BIN/etcd"
}

# Where setup-envtest could download binaries (a machine with internet),
# they are used as they are; here they are built.
downloaded="${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest/k8s/${K8S_VERSION#v}-$(go env GOOS)-$(go env GOARCH)"
if [ -z "$EXTRA_CMDS" ] && [ -x "$downloaded/kube-apiserver" ] && [ -x "$downloaded/etcd" ]; then
  echo "$downloaded"
  exit 0
fi

build_etcd
# shellcheck disable=SC2086
build_kube kube-apiserver $EXTRA_CMDS
echo "$BIN"
