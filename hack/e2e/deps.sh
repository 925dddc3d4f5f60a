#!/usr/bin/env bash
# Installs, from Debian's packages, what the e2e node needs and the machine lacks:
# containerd, runc, the CNI plugins, iptables, conntrack, openssl and a static libc
# (for the pause binary). Does nothing when all of it is there.
set -euo pipefail
# shellcheck source=hack/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x "$CNI_BIN_DIR/bridge" ] && [ -x "$CNI_BIN_DIR/host-local" ] && [ -x "$CNI_BIN_DIR/loopback" ] \
  || need+=(containernetworking-plugins)
command -v iptables >/dev/null || need+=(iptables)
command -v conntrack >/dev/null || need+=(conntrack)
command -v openssl >/dev/null || need+=(openssl)
command -v gcc >/dev/null || need+=(gcc)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -f /usr/lib/aarch64-linux-gnu/libc.a ] || need+=(libc6-dev)
command -v ip >/dev/null || need+=(iproute2)
command -v findmnt >/dev/null || need+=(util-linux)
command -v pgrep >/dev/null || need+=(procps)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
[ "$(id -u)" = 0 ] || die "need root to install: ${need[*]}"
log "installing from Debian: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
# The package lists may be missing or old on a fresh machine.
apt-get update -qq >/dev/null 2>&1 || apt-get update
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
