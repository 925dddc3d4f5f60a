#!/usr/bin/env bash
# Imports image tarballs (docker-style, as hack/e2e/imagebuilder writes them) into the
# e2e node's containerd, where the kubelet finds them: pods then use the image by
# its tag with imagePullPolicy IfNotPresent (or Never), and no registry is asked.
#
# Usage: hack/e2e/load-image.sh IMAGE.tar...
set -euo pipefail
# shellcheck source=hack/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

[ $# -gt 0 ] || die "usage: $0 IMAGE.tar..."
[ -S "$CONTAINERD_SOCK" ] || die "the e2e node's containerd is not running (no $CONTAINERD_SOCK): run make e2e-cluster"
for tar in "$@"; do
  # --all-platforms: our images carry one platform and no index; the CRI plugin
  # only sees images in the k8s.io namespace.
  ctr_k8s images import --all-platforms "$tar" >/dev/null
  log "imported $(tar -xOf "$tar" manifest.json | sed -n 's/.*"RepoTags":\["\([^"]*\)".*/\1/p') from $tar"
done
