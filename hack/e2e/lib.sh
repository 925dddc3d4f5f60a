# Shared settings for the e2e cluster scripts. Sourced, not run.
# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts that source this

E2E_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
K8S_VERSION="${K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.7.3}"
CACHE="${AGENTRUN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentrun}"

# Where the binaries are: hack/envtest-bins.sh builds them into this folder.
E2E_BIN="${E2E_BIN:-$CACHE/envtest/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}}"
E2E_CMDS="kubelet kube-controller-manager kube-scheduler kubectl"
# Image tarballs (pause, test tools) are cached here.
E2E_IMAGES="${E2E_IMAGES:-$CACHE/e2e/images}"

# Runtime state: everything a running cluster writes, wiped by cluster-down.
E2E_STATE="${E2E_STATE:-/var/lib/agentrun-e2e}"
E2E_RUN="${E2E_RUN:-/run/agentrun-e2e}"
E2E_LOGS="$E2E_STATE/logs"
E2E_PKI="$E2E_STATE/pki"
KUBELET_DIR="$E2E_STATE/kubelet"
CONTAINERD_SOCK="$E2E_RUN/containerd/containerd.sock"
CNI_CONF_DIR="$E2E_STATE/cni/net.d"
CNI_BIN_DIR="${CNI_BIN_DIR:-/usr/lib/cni}"

# The admin kubeconfig, for kubectl and the tests.
E2E_KUBECONFIG="${E2E_KUBECONFIG:-$E2E_ROOT/.e2e/kubeconfig}"

# Addresses. Everything listens on loopback except the API server, which also
# has to be reached from pods through the bridge's gateway address.
NODE_NAME="${NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}"
APISERVER_PORT="${APISERVER_PORT:-16443}"
ETCD_PORT="${ETCD_PORT:-23790}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-23800}"
KUBELET_PORT=10250
KUBELET_HEALTHZ_PORT=10248
POD_CIDR="${POD_CIDR:-10.244.0.0/24}"
POD_GATEWAY="${POD_GATEWAY:-10.244.0.1}"
SERVICE_CIDR="${SERVICE_CIDR:-10.96.0.0/24}"
KUBERNETES_SVC_IP="${KUBERNETES_SVC_IP:-10.96.0.1}"
CNI_BRIDGE="${CNI_BRIDGE:-agentrun0}"
CNI_NETWORK="agentrun-e2e"

# Images without a registry.
PAUSE_IMAGE="registry.k8s.io/pause:3.10.2"
TESTTOOL_IMAGE="${TESTTOOL_IMAGE:-agentrun.local/testtool:e2e}"

# The processes we start, in start order. Each writes $E2E_RUN/<name>.pid.
E2E_PROCS="etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet"

log() { echo "e2e: $*" >&2; }
die() { echo "e2e: ERROR: $*" >&2; exit 1; }

kubectl_admin() { "$E2E_BIN/kubectl" --kubeconfig "$E2E_KUBECONFIG" "$@"; }
ctr_k8s() { ctr --address "$CONTAINERD_SOCK" -n k8s.io "$@"; }

# running PID: true while PID runs. A zombie does not count: here our daemons'
# parent is PID 1, which may take a while to reap them.
running() {
  local st
  st="$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# pid_alive NAME: true when NAME's recorded process is running.
pid_alive() {
  local f="$E2E_RUN/$1.pid" pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [ -n "$pid" ] && running "$pid"
}

# wait_for DESCRIPTION SECONDS COMMAND...: polls COMMAND every half second.
wait_for() {
  local what="$1" secs="$2"; shift 2
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "timed out after ${secs}s waiting for $what"
      return 1
    fi
    sleep 0.5
  done
}
