#!/usr/bin/env bash
# Installs the operator into the running e2e cluster the way a user would:
# its image (built by hack/e2e/operator-image, no registry) is imported into the
# node, then the Helm chart charts/agentrun is installed, CRDs included, with
# Helm built from helm.sh/helm/v3 through `go tool`. Each run is a fresh
# install: a release left by an earlier run is uninstalled and its CRD deleted
# (Helm never upgrades the CRDs of crds/). Waits until the operator's pod is
# Ready.
#
# Usage: hack/e2e/deploy.sh OPERATOR_IMAGE.tar
# Env:   E2E_OPERATOR_IMAGE (agentrun.local/operator:e2e), E2E_OPERATOR_NAMESPACE
#        (agentrun-system), E2E_RELEASE (agentrun), E2E_HELM_ARGS (extra helm install args)
set -euo pipefail
# shellcheck source=hack/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

tar="${1:?usage: $0 OPERATOR_IMAGE.tar}"
image="${E2E_OPERATOR_IMAGE:-agentrun.local/operator:e2e}"
ns="${E2E_OPERATOR_NAMESPACE:-agentrun-system}"
release="${E2E_RELEASE:-agentrun}"
crd=agentruns.agents.agentrun.dev

[ -s "$E2E_KUBECONFIG" ] || die "no kubeconfig at $E2E_KUBECONFIG: run make e2e-cluster"
export KUBECONFIG="$E2E_KUBECONFIG"
helm() { (cd "$E2E_ROOT" && go tool -modfile=hack/tools/go.mod helm "$@"); }
t0=$(date +%s%N)
since() { local ms=$(( ($(date +%s%N) - t0) / 1000000 )); printf '%d.%ds' $((ms / 1000)) $((ms % 1000 / 100)); }

"$E2E_ROOT/hack/e2e/load-image.sh" "$tar"

# The operator's own namespace enforces "restricted" too: its pod meets it.
kubectl_admin apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: $ns
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
YAML

if helm status "$release" --namespace "$ns" >/dev/null 2>&1; then
  log "uninstalling the release $release left by an earlier run"
  helm uninstall "$release" --namespace "$ns" --wait --timeout 2m >/dev/null
fi
kubectl_admin delete crd "$crd" --ignore-not-found --wait=true >/dev/null

repo="${image%:*}" tag="${image##*:}"
log "installing charts/agentrun as $release in $ns with image $image ($(since))"
# shellcheck disable=SC2086  # E2E_HELM_ARGS is a list of words
helm install "$release" charts/agentrun --namespace "$ns" \
  --set image.repository="$repo" --set image.tag="$tag" --set image.pullPolicy=Never \
  --wait --timeout 3m ${E2E_HELM_ARGS:-} >/dev/null
kubectl_admin -n "$ns" wait --for=condition=Ready pod \
  -l "app.kubernetes.io/name=agentrun,app.kubernetes.io/instance=$release" --timeout=120s >/dev/null
log "operator Ready in $ns ($(since)): $(kubectl_admin -n "$ns" get pods -l "app.kubernetes.io/instance=$release" -o name | tr '\n' ' ')"
