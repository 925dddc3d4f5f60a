#!/usr/bin/env bash
# Smoke check of the e2e cluster (make e2e-cluster first): in a namespace that
# enforces the restricted Pod Security profile,
#   1. a Job from the test-tools image completes; its termination message is in the
#      pod's status and `kubectl logs` shows its output;
#   2. a Job whose tool ignores SIGTERM fails with DeadlineExceeded at its
#      activeDeadlineSeconds, and its pod is killed;
#   3. a pod reaches the API server through the "kubernetes" Service with its
#      ServiceAccount token, and is refused what that account may not read;
#   4. a pod that breaks the restricted profile is rejected at admission.
# Leaves nothing behind (the namespace is deleted) unless SMOKE_KEEP=1.
set -euo pipefail
# shellcheck source=hack/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

export KUBECONFIG="$E2E_KUBECONFIG"
k() { "$E2E_BIN/kubectl" "$@"; }
ns="smoke-$(date +%s)"
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

[ -s "$KUBECONFIG" ] || die "no kubeconfig at $KUBECONFIG: run make e2e-cluster"
cleanup() { [ "${SMOKE_KEEP:-}" = 1 ] || k delete namespace "$ns" --wait=false >/dev/null 2>&1 || true; }
trap cleanup EXIT

k create namespace "$ns" >/dev/null
k label namespace "$ns" pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=latest >/dev/null
wait_for "the default ServiceAccount in $ns" 30 k -n "$ns" get serviceaccount default

# job NAME ARGS_JSON [EXTRA_JOB_SPEC_YAML] [AUTOMOUNT]: a Job that meets "restricted".
job() {
  local name="$1" args="$2" extra="${3:-}" automount="${4:-false}"
  k -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: batch/v1
kind: Job
metadata:
  name: $name
spec:
  backoffLimit: 0
$extra
  template:
    spec:
      restartPolicy: Never
      automountServiceAccountToken: $automount
      terminationGracePeriodSeconds: 3
      securityContext:
        runAsNonRoot: true
        seccompProfile:
          type: RuntimeDefault
      containers:
      - name: tool
        image: $TESTTOOL_IMAGE
        imagePullPolicy: Never
        args: $args
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities:
            drop: [ALL]
        resources:
          requests: {cpu: 10m, memory: 16Mi}
          limits: {cpu: 500m, memory: 64Mi}
EOF
}
job_pod() { k -n "$ns" get pods -l "batch.kubernetes.io/job-name=$1" -o 'jsonpath={.items[0].metadata.name}'; }
job_cond() { # JOB TYPE: the status of the Job's condition TYPE
  k -n "$ns" get job "$1" -o "jsonpath={.status.conditions[?(@.type==\"$2\")].status}"
}
job_done() { [ "$(job_cond "$1" Complete)" = True ] || [ "$(job_cond "$1" Failed)" = True ]; }

# 1. A completing Job: termination message and logs.
t1=$(now_ms)
job ok '["echo", "hello from a real pod", "term", "{\"result\":\"ok\"}", "exit", "0"]'
if wait_for "Job ok to finish" 120 job_done ok && [ "$(job_cond ok Complete)" = True ]; then
  pass "Job ok completed in $(( ($(now_ms) - t1) )) ms from creation"
else
  fail "Job ok did not complete: $(k -n "$ns" get job ok -o 'jsonpath={.status.conditions}')"
fi
pod="$(job_pod ok)"
msg="$(k -n "$ns" get pod "$pod" -o 'jsonpath={.status.containerStatuses[0].state.terminated.message}')"
[ "$msg" = '{"result":"ok"}' ] && pass "termination message in the pod status: $msg" || fail "termination message: got '$msg'"
logs="$(k -n "$ns" logs "$pod" 2>&1)"
[ "$logs" = "hello from a real pod" ] && pass "kubectl logs: $logs" || fail "kubectl logs: got '$logs'"

# 2. A deadline kills a tool that ignores SIGTERM.
t2=$(now_ms)
job deadline '["ignore-sigterm", "echo", "started", "sleep", "300"]' "  activeDeadlineSeconds: 5"
if wait_for "Job deadline to fail" 90 job_done deadline && [ "$(job_cond deadline Failed)" = True ]; then
  reason="$(k -n "$ns" get job deadline -o 'jsonpath={.status.conditions[?(@.type=="Failed")].reason}')"
  [ "$reason" = DeadlineExceeded ] && pass "Job deadline failed with $reason after $(( ($(now_ms) - t2) )) ms" \
    || fail "Job deadline failed with reason $reason"
else
  fail "Job deadline did not fail: $(k -n "$ns" get job deadline -o 'jsonpath={.status.conditions}')"
fi
no_pods() { [ -z "$(k -n "$ns" get pods -l batch.kubernetes.io/job-name=deadline -o name)" ]; }
if wait_for "the deadline Job's pod to go" 60 no_pods; then
  pass "the SIGTERM-ignoring pod was killed and removed"
else
  fail "the deadline Job's pod is still there: $(k -n "$ns" get pods -o wide 2>&1 | tail -n +2)"
fi

# 3. The API server from a pod, as its ServiceAccount.
job api '["api", "/version", "api", "/api/v1/namespaces/'"$ns"'/secrets"]' "" true
if wait_for "Job api to finish" 90 job_done api && [ "$(job_cond api Complete)" = True ]; then
  out="$(k -n "$ns" logs "$(job_pod api)")"
  if echo "$out" | grep -q '^status=200' && echo "$out" | grep -q '"gitVersion": "'"$K8S_VERSION"'"'; then
    pass "a pod reached the API server through the kubernetes Service (GET /version: 200)"
  else
    fail "GET /version from a pod: $(echo "$out" | head -3)"
  fi
  echo "$out" | grep -q '^status=403' && pass "the pod's ServiceAccount may not list secrets (403)" \
    || fail "listing secrets from a pod: $(echo "$out" | tail -5)"
else
  fail "Job api did not complete: $(k -n "$ns" logs "$(job_pod api)" 2>&1 | tail -5)"
fi

# 4. Pod Security admission rejects a pod that breaks the restricted profile.
if out="$(k -n "$ns" run bad --image="$TESTTOOL_IMAGE" --image-pull-policy=Never --restart=Never -- sleep 1 2>&1)"; then
  fail "a pod without a restricted securityContext was admitted"
else
  echo "$out" | grep -q 'violates PodSecurity "restricted' && pass "PodSecurity rejected a non-restricted pod" \
    || fail "unexpected error creating a non-restricted pod: $out"
fi

if [ "$fails" -gt 0 ]; then
  echo "smoke: $fails check(s) failed; namespace $ns; logs in $E2E_LOGS"
  exit 1
fi
echo "smoke: all checks passed"
