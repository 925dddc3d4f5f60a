#!/usr/bin/env bash
# Brings up a real single-node Kubernetes on this machine, for end-to-end tests
# where pods really run: etcd, kube-apiserver (PodSecurity admission on),
# kube-controller-manager, kube-scheduler, containerd and the kubelet, all on
# loopback, started by hand (no systemd). Waits until the node is Ready, then prints
# the path of the admin kubeconfig.
#
# Idempotent: a component that already runs is left alone; a cluster that is fully
# up returns at once. Leftovers of a cluster that died are cleaned first.
# Tear down with hack/e2e/cluster-down.sh.
set -euo pipefail
# shellcheck source=hack/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || die "run as root: the kubelet and containerd need it"
t0=$(date +%s%N)
elapsed() { local d=$(( ($(date +%s%N) - t0) / 100000000 )); echo "$((d / 10)).$((d % 10))"; }

"$E2E_ROOT/hack/e2e/deps.sh"

# --- binaries: hack/envtest-bins.sh builds and caches them --------------------------
missing=""
for c in etcd kube-apiserver $E2E_CMDS; do [ -x "$E2E_BIN/$c" ] || missing+=" $c"; done
if [ -n "$missing" ]; then
  log "building:$missing (about 10 minutes on a cold cache)"
  bin_dir="$(EXTRA_CMDS="$E2E_CMDS" nice -n "${E2E_NICE:-15}" "$E2E_ROOT/hack/envtest-bins.sh")"
  [ "$bin_dir" = "$E2E_BIN" ] || die "hack/envtest-bins.sh built into $bin_dir, expected $E2E_BIN"
fi

# --- images ------------------------------------------------------------------------
"$E2E_ROOT/hack/e2e/images.sh" >/dev/null

any_alive=""
for p in $E2E_PROCS; do pid_alive "$p" && any_alive=1; done
if [ -z "$any_alive" ] && { [ -d "$E2E_STATE" ] || [ -d "$E2E_RUN" ]; }; then
  log "cleaning the leftovers of a previous cluster"
  "$E2E_ROOT/hack/e2e/cluster-down.sh" >&2 || die "could not clean the leftovers of a previous cluster (listed above)"
fi

mkdir -p "$E2E_STATE" "$E2E_RUN" "$E2E_LOGS" "$KUBELET_DIR" "$CNI_CONF_DIR" "$E2E_RUN/containerd"

# --- the host ----------------------------------------------------------------------
# kube-apiserver reaches the kubelet by the node's hostname (for logs, exec): it must
# resolve to loopback, where the kubelet listens.
if ! getent ahostsv4 "$NODE_NAME" | awk '{print $1}' | grep -qx 127.0.0.1; then
  log "adding $NODE_NAME to /etc/hosts"
  echo "127.0.0.1 $NODE_NAME # agentrun-e2e" >> /etc/hosts
fi
# The CNI bridge plugin turns on IP forwarding; cluster-down puts it back.
[ -f "$E2E_STATE/ip_forward.orig" ] || cat /proc/sys/net/ipv4/ip_forward > "$E2E_STATE/ip_forward.orig"

"$E2E_ROOT/hack/e2e/pki.sh"
P="$E2E_PKI"

# start NAME COMMAND...: starts COMMAND detached, logging to $E2E_LOGS/NAME.log,
# unless NAME already runs.
start() {
  local name="$1"; shift
  if pid_alive "$name"; then
    log "$name already running (pid $(cat "$E2E_RUN/$name.pid"))"
    return
  fi
  setsid "$@" >>"$E2E_LOGS/$name.log" 2>&1 </dev/null &
  echo $! > "$E2E_RUN/$name.pid"
  log "started $name (pid $!), log $E2E_LOGS/$name.log"
}

# healthy NAME URL [CURL ARGS]: waits for URL, failing with NAME's log if it dies.
healthy() {
  local name="$1" url="$2"; shift 2
  local deadline=$(( $(date +%s) + ${E2E_WAIT:-120} ))
  until curl -fsS --max-time 2 "$@" "$url" >/dev/null 2>&1; do
    if ! pid_alive "$name"; then
      tail -n 30 "$E2E_LOGS/$name.log" >&2
      die "$name exited"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      tail -n 30 "$E2E_LOGS/$name.log" >&2
      die "$name not healthy at $url"
    fi
    sleep 0.3
  done
}

# --- etcd --------------------------------------------------------------------------
start etcd "$E2E_BIN/etcd" --name e2e --data-dir "$E2E_STATE/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn

# --- containerd --------------------------------------------------------------------
cat > "$E2E_STATE/containerd.toml" <<EOF
version = 2
root = "$E2E_STATE/containerd"
state = "$E2E_RUN/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "$CONTAINERD_SOCK"

[ttrpc]
  address = "$E2E_RUN/containerd/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$E2E_STATE/containerd-opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This machine's root lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj, and
  # every sandbox fails ("can't get final child's PID from pipe: EOF") without this.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$CNI_CONF_DIR"
    max_conf_num = 1
EOF
# A bridge on a private range with host-local IPAM; no masquerade: pods talk to this
# host only. containerd adds the loopback interface itself (the loopback plugin).
cat > "$CNI_CONF_DIR/10-agentrun-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$POD_GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$E2E_STATE/cni/networks"
      }
    }
  ]
}
EOF
start containerd containerd --config "$E2E_STATE/containerd.toml" --log-level warn
wait_for "containerd" 60 ctr --address "$CONTAINERD_SOCK" version || { tail -n 30 "$E2E_LOGS/containerd.log" >&2; die "containerd did not start"; }

# The images the node needs, imported each start (the store is wiped by cluster-down).
for t in pause testtool; do
  "$E2E_ROOT/hack/e2e/load-image.sh" "$E2E_IMAGES/$t.tar" 2>/dev/null
done

healthy etcd "http://127.0.0.1:$ETCD_PORT/health"

# --- kube-apiserver ----------------------------------------------------------------
# It binds every address: the kubelet and people use 127.0.0.1, pods reach it through
# the bridge's gateway (see the DNAT below). It reaches the kubelet by Hostname, which
# resolves to 127.0.0.1; the endpoint reconciler is off, as the advertised address
# is no use to anyone here.
start kube-apiserver "$E2E_BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 0.0.0.0 --secure-port "$APISERVER_PORT" \
  --tls-cert-file "$P/apiserver.crt" --tls-private-key-file "$P/apiserver.key" \
  --client-ca-file "$P/ca.crt" \
  --kubelet-client-certificate "$P/apiserver-kubelet-client.crt" --kubelet-client-key "$P/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$P/ca.crt" \
  --kubelet-preferred-address-types Hostname,InternalIP \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$P/sa.pub" --service-account-signing-key-file "$P/sa.key" \
  --api-audiences https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --authorization-mode Node,RBAC \
  --enable-admission-plugins NodeRestriction,PodSecurity \
  --endpoint-reconciler-type none \
  --allow-privileged=true \
  --profiling=false
healthy kube-apiserver "https://127.0.0.1:$APISERVER_PORT/readyz" --cacert "$P/ca.crt" --cert "$P/admin.crt" --key "$P/admin.key"
log "kube-apiserver ready at $(elapsed)s"

# --- kube-controller-manager, kube-scheduler --------------------------------------
start kube-controller-manager "$E2E_BIN/kube-controller-manager" \
  --kubeconfig "$P/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig "$P/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig "$P/kube-controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 10257 \
  --service-account-private-key-file "$P/sa.key" --root-ca-file "$P/ca.crt" \
  --cluster-signing-cert-file "$P/ca.crt" --cluster-signing-key-file "$P/ca.key" \
  --use-service-account-credentials=true --leader-elect=false \
  --service-cluster-ip-range "$SERVICE_CIDR" --profiling=false
start kube-scheduler "$E2E_BIN/kube-scheduler" \
  --kubeconfig "$P/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig "$P/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig "$P/kube-scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false --profiling=false

# --- kubelet -----------------------------------------------------------------------
cat > "$E2E_STATE/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $P/kubelet-serving.crt
tlsPrivateKeyFile: $P/kubelet-serving.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $P/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
podLogsDir: $E2E_STATE/pod-logs
resolvConf: /etc/resolv.conf
maxPods: 50
# A test node on a shared disk: evict only when it is really short.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
EOF
mkdir -p "$E2E_STATE/pod-logs"
start kubelet "$E2E_BIN/kubelet" --config "$E2E_STATE/kubelet-config.yaml" \
  --kubeconfig "$P/kubelet.kubeconfig" --root-dir "$KUBELET_DIR" --hostname-override "$NODE_NAME" --v=1
healthy kube-controller-manager https://127.0.0.1:10257/healthz -k
healthy kube-scheduler https://127.0.0.1:10259/healthz -k
healthy kubelet "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz"

# --- pod networking beyond the bridge ----------------------------------------------
# Pods find the API server as the "kubernetes" Service ($KUBERNETES_SVC_IP:443). No
# kube-proxy runs, so one DNAT rule sends that address to the API server through the
# bridge's gateway. Pod traffic to anything but this host and other pods is dropped:
# there is no masquerade and nothing outside for a test pod to talk to.
ipt_chain() { # TABLE CHAIN PARENT: an own chain, jumped to from PARENT
  iptables -w -t "$1" -N "$2" 2>/dev/null || iptables -w -t "$1" -F "$2"
  iptables -w -t "$1" -C "$3" -j "$2" 2>/dev/null || iptables -w -t "$1" -I "$3" -j "$2"
}
ipt_chain nat AGENTRUN-E2E-SVC PREROUTING
iptables -w -t nat -A AGENTRUN-E2E-SVC -d "$KUBERNETES_SVC_IP/32" -p tcp --dport 443 \
  -j DNAT --to-destination "$POD_GATEWAY:$APISERVER_PORT"
ipt_chain filter AGENTRUN-E2E-FWD FORWARD
iptables -w -t filter -A AGENTRUN-E2E-FWD -s "$POD_CIDR" ! -d "$POD_CIDR" -j DROP

# --- wait for the node ---------------------------------------------------------------
node_ready() {
  [ "$(kubectl_admin get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
if ! wait_for "node $NODE_NAME Ready" "${E2E_WAIT:-120}" node_ready; then
  tail -n 30 "$E2E_LOGS/kubelet.log" >&2
  die "node $NODE_NAME not Ready"
fi
# Pods need the default ServiceAccount of their namespace.
wait_for "the default ServiceAccount" 60 kubectl_admin -n default get serviceaccount default || true

log "node $NODE_NAME Ready after $(elapsed)s"
log "export KUBECONFIG=$E2E_KUBECONFIG"
echo "$E2E_KUBECONFIG"
