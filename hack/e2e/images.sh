#!/usr/bin/env bash
# Builds the e2e images as image tarballs, without a registry or a container engine,
# and caches them under $E2E_IMAGES:
#   pause.tar     registry.k8s.io/pause:3.10.2, pause.c from the kubernetes module, static
#   testtool.tar  agentrun.local/testtool:e2e, hack/e2e/testtool, static, user 65532
#
# Usage: hack/e2e/images.sh            build what is missing or stale, print the folder
#        hack/e2e/images.sh --import   and import them into the running node's containerd
set -euo pipefail
# shellcheck source=hack/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

mkdir -p "$E2E_IMAGES"
builder="$E2E_ROOT/hack/e2e/imagebuilder"

# imagebuilder ARGS...: the generic image builder (hack/e2e/imagebuilder).
imagebuilder() { "$E2E_ROOT/hack/e2e/imagebuilder.sh" "$@"; }

build_pause() {
  local out="$E2E_IMAGES/pause.tar" src bin
  [ -s "$out" ] && return
  # The kubernetes module holds build/pause; hack/envtest-bins.sh has downloaded it already.
  src="$(cd /tmp && go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')/build/pause/linux/pause.c"
  [ -f "$src" ] || die "pause.c not found at $src"
  bin="$(mktemp -d)/pause"
  log "building the pause image from $src"
  gcc -Os -Wall -Werror -static -DVERSION="v3.10.2-agentrun" -o "$bin" "$src"
  strip "$bin" 2>/dev/null || true
  imagebuilder -o "$out" -t "$PAUSE_IMAGE" -add "$bin:/pause:0755" -entrypoint /pause -user 65535:65535 >/dev/null
  rm -rf "$(dirname "$bin")"
}

build_testtool() {
  local out="$E2E_IMAGES/testtool.tar" tmp stamp
  tmp="$(mktemp -d)"
  (cd "$E2E_ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$tmp/testtool" ./hack/e2e/testtool)
  stamp="$(cat "$tmp/testtool" "$builder/main.go" | sha256sum | cut -c1-16) $TESTTOOL_IMAGE"
  if [ -s "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$stamp" ]; then
    rm -rf "$tmp"
    return
  fi
  log "building the test-tools image $TESTTOOL_IMAGE"
  imagebuilder -o "$out" -t "$TESTTOOL_IMAGE" -add "$tmp/testtool:/testtool:0755" -mkdir /tmp:1777 \
    -entrypoint /testtool -user 65532:65532 >/dev/null
  echo "$stamp" > "$out.stamp"
  rm -rf "$tmp"
}

build_pause
build_testtool

if [ "${1:-}" = "--import" ]; then
  for t in pause testtool; do
    "$E2E_ROOT/hack/e2e/load-image.sh" "$E2E_IMAGES/$t.tar"
  done
fi
echo "$E2E_IMAGES"
