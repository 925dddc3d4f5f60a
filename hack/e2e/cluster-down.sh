#!/usr/bin/env bash
# Tears the e2e cluster down and leaves nothing of it behind: no process, mount,
# cgroup, iptables chain, network namespace, link or state directory. Then lists
# what is left, which should be nothing, and fails if anything is.
#
# Usage: hack/e2e/cluster-down.sh          tear down, then check
#        hack/e2e/cluster-down.sh --check  only check for leftovers
set -uo pipefail
# shellcheck source=hack/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || die "run as root"

# Processes of ours: their command lines name our state or run directory (the
# binaries' own folder is shared with envtest, so it cannot tell ours apart).
our_pids() { pgrep -f -- "$E2E_STATE/|$E2E_RUN/" | grep -vx "$$" || true; }
# Processes in the pods' cgroups (containers, whatever their command line).
pod_pids() {
  local d
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/kubepods.slice; do
    [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -u
}
# Mount points of ours, deepest first.
our_mounts() {
  findmnt -rn -o TARGET | grep -E "^($E2E_STATE|$E2E_RUN|/run/containerd|/var/lib/kubelet|/run/netns/cni-|/var/run/netns/cni-)(/|$)" | sort -r || true
}
kube_cgroups() { find /sys/fs/cgroup -maxdepth 2 -type d \( -name kubepods -o -name kubepods.slice \) 2>/dev/null || true; }
ipt_cmds() {
  local c
  for c in iptables ip6tables iptables-legacy ip6tables-legacy; do command -v "$c" >/dev/null && echo "$c"; done
}
our_chains() { # CMD TABLE
  "$1" -w -t "$2" -S 2>/dev/null | awk '/^-N (KUBE-|CNI-|AGENTRUN-E2E)/ {print $2}'
}

check() {
  local bad=0 out
  report() { # WHAT LINES
    if [ -n "$2" ]; then
      echo "LEFT: $1:"; printf '  %s\n' $2; bad=1
    else
      echo "ok:   no $1"
    fi
  }
  out="$(our_pids; pod_pids)"
  report "processes" "$(for p in $out; do echo "$p:$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | cut -c1-80 | tr ' ' '_')"; done)"
  report "mounts" "$(our_mounts)"
  report "kubepods cgroups" "$(kube_cgroups)"
  out=""
  for c in $(ipt_cmds); do for t in filter nat mangle raw; do
    for ch in $(our_chains "$c" "$t"); do out+="$c/$t/$ch "; done
  done; done
  report "iptables chains" "$out"
  report "network namespaces" "$(for n in /run/netns/cni-*; do [ -e "$n" ] && basename "$n"; done)"
  report "links" "$(ip -o link show 2>/dev/null | awk -F': ' -v b="$CNI_BRIDGE" '$2==b || $2 ~ /^veth/ {print $2}')"
  out=""
  for d in "$E2E_STATE" "$E2E_RUN" /run/containerd /var/lib/kubelet/device-plugins /var/lib/cni /var/log/containers /var/log/pods "$E2E_KUBECONFIG"; do
    [ -e "$d" ] && out+="$d "
  done
  report "files" "$out"
  return $bad
}

if [ "${1:-}" = "--check" ]; then
  check
  exit
fi

# stop NAME [SECONDS]: SIGTERM, then SIGKILL after SECONDS.
stop() {
  local name="$1" secs="${2:-10}" f="$E2E_RUN/$1.pid" pid i
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  if [ -n "$pid" ] && running "$pid"; then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < secs * 10; i++)); do running "$pid" || break; sleep 0.1; done
    running "$pid" && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$f"
}

# 1. No new pods: stop the controllers and the scheduler.
stop kube-controller-manager
stop kube-scheduler

# 2. Let the kubelet stop every pod, so that containerd tears the pods' networks
#    down through CNI (veth, IP allocation, network namespace).
if pid_alive kube-apiserver && pid_alive kubelet && [ -s "$E2E_KUBECONFIG" ]; then
  log "deleting all pods"
  kubectl_admin delete pods --all -A --force --grace-period=0 --wait=false >/dev/null 2>&1 || true
  if pid_alive containerd; then
    wait_for "pods to stop" 30 bash -c "[ -z \"\$(ctr --address '$CONTAINERD_SOCK' -n k8s.io tasks ls -q 2>/dev/null)\" ]" || true
  fi
fi
stop kubelet 15

# 3. Whatever still runs in containerd is killed.
if pid_alive containerd; then
  for t in $(ctr_k8s tasks ls -q 2>/dev/null); do
    ctr_k8s tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
  done
  sleep 1
  for t in $(ctr_k8s tasks ls -q 2>/dev/null); do ctr_k8s tasks delete -f "$t" >/dev/null 2>&1 || true; done
fi
stop containerd 15
stop kube-apiserver
stop etcd

# 4. Leftover processes: shims, containers, anything started from our state.
for pass in 1 2 3; do
  pids="$(our_pids; pod_pids)"
  [ -z "$pids" ] && break
  log "killing leftover processes: $(echo $pids)"
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null
  sleep 1
done

# 5. Mounts: containers' root filesystems and shm, pod volumes, network namespaces,
#    and the kubelet's bind mount of its own root directory.
for pass in 1 2 3 4 5; do
  mounts="$(our_mounts)"
  [ -z "$mounts" ] && break
  while read -r m; do
    [ -n "$m" ] || continue
    if [ "$pass" -lt 4 ]; then umount "$m" 2>/dev/null; else umount -l "$m" 2>/dev/null; fi
  done <<<"$mounts"
done

# 6. Network: namespaces, veths, the bridge, iptables chains (the kubelet's
#    KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT, any CNI-, our AGENTRUN-E2E-).
for ns in /run/netns/cni-*; do
  [ -e "$ns" ] || continue
  umount "$ns" 2>/dev/null
  rm -f "$ns"
done
rmdir /run/netns 2>/dev/null
for l in $(ip -o link show master "$CNI_BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
  ip link del "$l" 2>/dev/null
done
ip link del "$CNI_BRIDGE" 2>/dev/null
for c in $(ipt_cmds); do
  for t in filter nat mangle raw; do
    chains="$(our_chains "$c" "$t")"
    [ -n "$chains" ] || continue
    re="$(echo $chains | tr ' ' '|')"
    # Rules that jump to our chains, from any chain, are deleted first.
    "$c" -w -t "$t" -S 2>/dev/null | grep -E -- "-j ($re)( |$)" | sed 's/^-A /-D /' | while read -r rule; do
      # shellcheck disable=SC2086
      eval "$c -w -t $t $rule" 2>/dev/null
    done
    for ch in $chains; do "$c" -w -t "$t" -F "$ch" 2>/dev/null; done
    for ch in $chains; do "$c" -w -t "$t" -X "$ch" 2>/dev/null; done
  done
done
if [ -f "$E2E_STATE/ip_forward.orig" ]; then
  cat "$E2E_STATE/ip_forward.orig" > /proc/sys/net/ipv4/ip_forward 2>/dev/null
fi

# 7. cgroups: the kubelet's kubepods hierarchy in every controller, deepest first.
for d in $(kube_cgroups); do
  find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
done

# 8. Files. Nothing is removed while a mount is still under it.
sandboxes="$(for d in "$E2E_STATE" "$E2E_RUN"; do
  for s in "$d"/containerd/io.containerd.grpc.v1.cri/sandboxes/*; do [ -d "$s" ] && basename "$s"; done
done | sort -u)"
if [ -n "$(our_mounts)" ]; then
  log "mounts remain, files kept"
else
  rm -rf --one-file-system "$E2E_STATE" "$E2E_RUN"
  # containerd's shims and runc keep state here whatever containerd's own state dir.
  # A containerd just killed may still be listed for a moment: wait for it
  # (up to 5 s), or the directory is left behind.
  for ((i = 0; i < 50; i++)); do pgrep -x containerd >/dev/null || break; sleep 0.1; done
  pgrep -x containerd >/dev/null || rm -rf --one-file-system /run/containerd
  # The kubelet puts its device-plugin socket here whatever its root directory.
  rm -rf --one-file-system /var/lib/kubelet/device-plugins
  rmdir /var/lib/kubelet 2>/dev/null
fi
# CNI's cache of results and IP allocations, ours only: our network's, and the
# loopback network's for our sandboxes (left when containerd died before CNI DEL).
rm -rf /var/lib/cni/results/"$CNI_NETWORK"-* /var/lib/cni/networks/"$CNI_NETWORK"
for id in $sandboxes; do rm -f /var/lib/cni/results/*-"$id"-*; done
rmdir /var/lib/cni/results /var/lib/cni/networks /var/lib/cni 2>/dev/null
# Links the kubelet made to our pods' logs (which were in $E2E_STATE/pod-logs).
if [ -d /var/log/containers ]; then
  for l in /var/log/containers/*.log; do
    [ -L "$l" ] || continue
    case "$(readlink "$l")" in "$E2E_STATE"/*) rm -f "$l" ;; *) [ -e "$l" ] || rm -f "$l" ;; esac
  done
  rmdir /var/log/containers 2>/dev/null
fi
sed -i '/ # agentrun-e2e$/d' /etc/hosts 2>/dev/null
rm -f "$E2E_KUBECONFIG"
rmdir "$(dirname "$E2E_KUBECONFIG")" 2>/dev/null

log "down; checking for leftovers"
check
