#!/usr/bin/env bash
# Prints the state of the e2e cluster: each component's process and resident memory,
# the memory of shims and pods, their sum, and the node.
set -uo pipefail
# shellcheck source=hack/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
total=0
printf '%-24s %8s %10s\n' COMPONENT PID RSS_MIB
for p in $E2E_PROCS; do
  if pid_alive "$p"; then
    pid="$(cat "$E2E_RUN/$p.pid")"; r="$(rss_kib "$pid")"; total=$((total + r))
    printf '%-24s %8s %10.1f\n' "$p" "$pid" "$(awk -v k="$r" 'BEGIN {print k / 1024}')"
  else
    printf '%-24s %8s %10s\n' "$p" - "not running"
  fi
done
# Shims (their command line names our containerd's socket) and the pods' processes.
others=0; n=0
for pid in $(pgrep -f -- "-address $CONTAINERD_SOCK"; for d in /sys/fs/cgroup/memory/kubepods /sys/fs/cgroup/kubepods; do
  [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null; done); do
  r="$(rss_kib "$pid")"; others=$((others + r)); n=$((n + 1))
done
total=$((total + others))
printf '%-24s %8s %10.1f\n' "shims and pods" "($n)" "$(awk -v k="$others" 'BEGIN {print k / 1024}')"
printf '%-24s %8s %10.1f\n' total "" "$(awk -v k="$total" 'BEGIN {print k / 1024}')"
if [ -s "$E2E_KUBECONFIG" ] && pid_alive kube-apiserver; then
  echo
  kubectl_admin get nodes -o wide 2>&1
  echo
  kubectl_admin get pods -A --no-headers 2>/dev/null | wc -l | xargs echo "pods:"
fi
echo "KUBECONFIG=$E2E_KUBECONFIG"
