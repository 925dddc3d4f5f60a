#!/usr/bin/env bash
# Tests of charts/agentrun with Helm built from Go modules (hack/tools):
# helm lint --strict and helm template with the default values and each
# value set in charts/agentrun/ci/, checks on what they render, and value
# sets that must be refused (a misspelled or mistyped value fails against
# values.schema.json). Run from the repository root; `make chart-lint`.
set -euo pipefail
cd "$(dirname "$0")/.."
chart=charts/agentrun
fail() { echo "chart-test: $*" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Built once (from the build cache when `go tool helm` ran before): each
# `go tool` call would check the build again.
go build -modfile=hack/tools/go.mod -o "$out/helm" helm.sh/helm/v3/cmd/helm
helm() { "$out/helm" "$@"; }
# The chart needs Kubernetes 1.31+ (kubeVersion); Helm assumes an old one
# unless told. This is the version the e2e node runs.
kube=(--kube-version "${CHART_KUBE_VERSION:-1.37.2}")

sets=(default "$chart"/ci/*-values.yaml)
for s in "${sets[@]}"; do
  args=()
  [ "$s" = default ] || args=(-f "$s")
  name=$(basename "$s" .yaml)
  helm lint --strict "$chart" "${kube[@]}" "${args[@]}" >/dev/null || fail "helm lint --strict failed with $name"
  helm template agentrun "$chart" --namespace agentrun-system "${kube[@]}" "${args[@]}" >"$out/$name.yaml" \
    || fail "helm template failed with $name"
  ! grep -q 'runAsUser:' "$out/$name.yaml" || fail "$name: the chart must not set runAsUser (OpenShift assigns it)"
done

has() { grep -q -- "$2" "$out/$1.yaml" || fail "$1 does not render: $2"; }
hasnt() { ! grep -q -- "$2" "$out/$1.yaml" || fail "$1 renders, but should not: $2"; }
has default '--metrics-secure=true'
has default 'name: https-metrics'
has default 'kind: ClusterRole' # manager, metrics-auth, metrics-reader
has default 'tokenreviews'
hasnt default 'kind: ServiceMonitor'
hasnt default 'AGENTRUN_ARCHIVE_DSN'
has archive-values 'name: AGENTRUN_ARCHIVE_DSN'
has console-values 'name: agentrun-archive-reader'
hasnt default '--notification-webhook-secret'
hasnt default 'agentrun-notifications'
has notifications-values '--notification-webhook-secret=agentrun-system/agentrun-webhook/url'
has notifications-values '--namespace-notifications'
has notifications-values 'resourceNames: \[agentrun-notifications\]'
has notifications-values 'resourceNames: \["agentrun-webhook"\]'
has archive-values '--archive-ttl=2160h'
hasnt archive-values 'postgres://'
# The operator's NetworkPolicy is on by default: egress anywhere but the
# cloud metadata addresses; the egress policy's flags are passed.
has default 'kind: NetworkPolicy'
has default 'cidr: 0.0.0.0/0'
has default '- 169.254.169.254/32'
has default 'cidr: ::/0'
has default '- fd00:ec2::254/128'
has default '--egress-allow-private=false'
hasnt default '--egress-allow-cidrs'
hasnt default 'kind: PodDisruptionBudget'
has ha-values 'kind: PodDisruptionBudget'
has ha-values 'minAvailable: 1'
has ha-values '--leader-elect=true'
has ha-values 'topologySpreadConstraints:'
has ha-values 'app.kubernetes.io/component: operator'
has locked-down-values 'kind: NetworkPolicy'
has locked-down-values 'kind: ServiceMonitor'
has locked-down-values 'scheme: https'
has locked-down-values 'secretName: agentrun-metrics-tls'
has locked-down-values '--metrics-cert-dir=/etc/agentrun/metrics-certs'
has locked-down-values 'name: registry-credentials'
has locked-down-values '--egress-allow-cidrs=10.96.0.0/12,192.0.2.7/32'
hasnt locked-down-values '169.254.169.254/32' # its own egress rules replace the default
has plain-metrics-values '--metrics-secure=false'
has shards-values 'name: agentrun-shard-a$'
has shards-values 'name: agentrun-shard-b$'
has shards-values '--shard=a'
has shards-values '--shard=b'
has shards-values 'agents.agentrun.dev/shard: b'
has shards-values 'app.kubernetes.io/component: operator-shard'
has shards-values 'kind: Role$' # leader election, for shard b
[ "$(grep -c -- '--leader-elect=true' "$out/shards-values.yaml")" = 1 ] || fail "shards-values: only shard b (2 replicas) elects a leader"
[ "$(grep -c -- '^kind: Deployment' "$out/shards-values.yaml")" = 3 ] || fail "shards-values: want 3 Deployments"
[ "$(grep -c -- '^kind: PodDisruptionBudget' "$out/shards-values.yaml")" = 3 ] || fail "shards-values: want 3 PodDisruptionBudgets"
hasnt default '--shard='
has plain-metrics-values 'scheme: http$'
hasnt plain-metrics-values 'tokenreviews'
# Extension points: objects made with the release (a map or a string, both
# through tpl), volumes and mounts, pod labels, annotations and priority.
has extras-values 'name: agentrun-company-ca'
has extras-values 'name: agentrun-notes'
has extras-values 'mountPath: /etc/agentrun/company-ca'
has extras-values 'value: /etc/agentrun/company-ca'
has extras-values 'priorityClassName: system-cluster-critical'
has extras-values 'example.com/owner: platform-team'
has extras-values 'team: platform'
hasnt default 'volumeMounts:'
# Tool pods: a fixed uid by default, the platform's on OpenShift.
has default '--tool-run-as-user=65532'
has openshift-values '--tool-run-as-user=assigned'
# The identity policies (MutatingAdmissionPolicy v1) where the cluster
# serves them, 1.36+; before, the chart leaves them out and the operator
# applies unstamped answers.
has default 'kind: MutatingAdmissionPolicy$'
hasnt default '--accept-unstamped-answers'
helm template agentrun "$chart" --namespace agentrun-system --kube-version 1.35.0 >"$out/k135.yaml" \
  || fail "helm template --kube-version 1.35.0 failed"
helm lint --strict "$chart" --kube-version 1.35.0 >/dev/null || fail "helm lint --strict --kube-version 1.35.0 failed"
hasnt k135 'kind: MutatingAdmissionPolicy$'
has k135 'kind: ValidatingAdmissionPolicy$'
has k135 '--accept-unstamped-answers'
# A cluster's discovery decides where it lists kinds: a 1.37 API server
# with MutatingAdmissionPolicy turned off gets none.
vap=admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy
map=admissionregistration.k8s.io/v1/MutatingAdmissionPolicy
helm template agentrun "$chart" "${kube[@]}" --api-versions "$vap" >"$out/nomap.yaml" || fail "helm template --api-versions $vap failed"
hasnt nomap 'kind: MutatingAdmissionPolicy$'
has nomap '--accept-unstamped-answers'
helm template agentrun "$chart" "${kube[@]}" --api-versions "$vap" --api-versions "$map" >"$out/map.yaml" || fail "helm template --api-versions $map failed"
has map 'kind: MutatingAdmissionPolicy$'
hasnt map '--accept-unstamped-answers'
if helm template agentrun "$chart" --kube-version 1.30.0 >/dev/null 2>&1; then
  fail "helm template accepted Kubernetes 1.30, whose API server cannot serve the CRDs' rules (isCIDR)"
fi

# Refused: each must fail helm template (so helm install), naming the
# value; a schema violation must fail helm lint --strict too (lint reports a
# template's own fail, an "execution error", as information only).
refuse() {
  local want=$1
  shift
  local msg
  if msg=$(helm template agentrun "$chart" "${kube[@]}" "$@" 2>&1); then
    fail "helm template accepted $*"
  fi
  grep -q -- "$want" <<<"$msg" || fail "helm template refused $* without naming $want: $msg"
  if ! grep -q 'execution error' <<<"$msg" && helm lint --strict "$chart" "${kube[@]}" "$@" >/dev/null 2>&1; then
    fail "helm lint accepted $*"
  fi
}
refuse "'replica'" --set replica=2
refuse "'enabeld'" --set metrics.serviceMonitor.enabeld=true
refuse "'tolerance'" --set-json 'tolerance=[]'
refuse "/replicas" --set replicas=two
refuse "/shards/0/name" --set 'shards[0].name=Team_A'
refuse "/image/pullPolicy" --set image.pullPolicy=Sometimes
refuse "/egress/allowCIDRs/0" --set 'egress.allowCIDRs[0]=metadata.internal'
refuse "/egress/allowPrivate" --set egress.allowPrivate=yes
refuse "/toolPods/runAsUser" --set toolPods.runAsUser=0
refuse "/extraVolumes" --set extraVolumes=ca
refuse "/toolPods/runAsUser" --set toolPods.runAsUser=root
refuse "not both" --set podDisruptionBudget.enabled=true --set podDisruptionBudget.minAvailable=1
# podLabels may not change the selector's labels (the Deployment would
# select no pod) nor repeat the chart's own; nor podAnnotations its one.
refuse "podLabels: app.kubernetes.io/component" --set 'podLabels.app\.kubernetes\.io/component=web'
refuse "podLabels: app.kubernetes.io/instance" --set 'podLabels.app\.kubernetes\.io/instance=other'
refuse "podLabels: agents.agentrun.dev/shard" --set 'podLabels.agents\.agentrun\.dev/shard=a'
refuse "podLabels: helm.sh/chart" --set 'podLabels.helm\.sh/chart=x'
refuse "podAnnotations: kubectl.kubernetes.io/default-container" --set 'podAnnotations.kubectl\.kubernetes\.io/default-container=x'
echo "chart-test: ${#sets[@]} value sets render and lint; misspelled and mistyped values are refused"
