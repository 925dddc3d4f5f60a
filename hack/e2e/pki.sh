#!/usr/bin/env bash
# Generates, with openssl, the e2e cluster's certificates, service-account keys and
# kubeconfigs under $E2E_PKI. Keeps what is already there (the cluster's state is
# wiped by cluster-down, and the certificates with it).
set -euo pipefail
# shellcheck source=hack/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

mkdir -p "$E2E_PKI"
chmod 700 "$E2E_PKI"
cd "$E2E_PKI"
host_ip="$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')"

newkey() { openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null; chmod 600 "$1.key"; }

if [ ! -s ca.crt ]; then
  newkey ca
  openssl req -x509 -new -key ca.key -subj "/CN=agentrun-e2e-ca" -days 3650 -out ca.crt \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
fi

# cert NAME SUBJECT EXTKEYUSAGE [SANS]: a leaf certificate signed by the CA.
cert() {
  local name="$1" subj="$2" eku="$3" sans="${4:-}"
  [ -s "$name.crt" ] && return
  newkey "$name"
  openssl req -new -key "$name.key" -subj "$subj" -out "$name.csr" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [ -n "$sans" ] && echo "subjectAltName=$sans"
  } > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

apiserver_sans="DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
apiserver_sans+=",DNS:kubernetes.default.svc.cluster.local,DNS:${NODE_NAME}"
apiserver_sans+=",IP:127.0.0.1,IP:${KUBERNETES_SVC_IP},IP:${POD_GATEWAY}${host_ip:+,IP:$host_ip}"
cert apiserver "/CN=kube-apiserver" serverAuth "$apiserver_sans"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
cert admin "/O=system:masters/CN=kubernetes-admin" clientAuth
cert kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
cert kube-scheduler "/CN=system:kube-scheduler" clientAuth
cert kubelet "/O=system:nodes/CN=system:node:${NODE_NAME}" clientAuth
cert kubelet-serving "/CN=${NODE_NAME}" serverAuth "DNS:${NODE_NAME},DNS:localhost,IP:127.0.0.1${host_ip:+,IP:$host_ip}"

if [ ! -s sa.key ]; then
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  chmod 600 sa.key
fi

# kubeconfig NAME: a kubeconfig for NAME.crt/NAME.key with the certificates inline.
kubeconfig() {
  local name="$1" out="${2:-$E2E_PKI/$1.kubeconfig}"
  [ -s "$out" ] && return
  mkdir -p "$(dirname "$out")"
  cat > "$out.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: agentrun-e2e
  cluster:
    server: https://127.0.0.1:${APISERVER_PORT}
    certificate-authority-data: $(base64 -w0 < ca.crt)
users:
- name: ${name}
  user:
    client-certificate-data: $(base64 -w0 < "$name.crt")
    client-key-data: $(base64 -w0 < "$name.key")
contexts:
- name: agentrun-e2e
  context:
    cluster: agentrun-e2e
    user: ${name}
current-context: agentrun-e2e
EOF
  chmod 600 "$out.tmp"
  mv "$out.tmp" "$out"
}

kubeconfig admin
kubeconfig kube-controller-manager
kubeconfig kube-scheduler
kubeconfig kubelet
# The copy for people and tests; replaced whenever the cluster's CA changes.
if ! cmp -s "$E2E_PKI/admin.kubeconfig" "$E2E_KUBECONFIG" 2>/dev/null; then
  mkdir -p "$(dirname "$E2E_KUBECONFIG")"
  install -m 600 "$E2E_PKI/admin.kubeconfig" "$E2E_KUBECONFIG"
fi
