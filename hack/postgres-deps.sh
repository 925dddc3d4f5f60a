#!/usr/bin/env bash
# Installs PostgreSQL's server from Debian's packages when the machine has
# none, for the archive's tests (internal/archive/pgtest starts a throwaway
# server of its own from these binaries; nothing listens on a port). Does
# nothing when initdb is already there. About 60 MB to download on a
# fresh Debian 12 (postgresql-15 and libllvm14 are most of it).
set -euo pipefail

if command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "postgres-deps: need root to install postgresql (the archive's tests fail under CI=true without it)" >&2
  exit 1
fi
echo "postgres-deps: installing postgresql from Debian" >&2
# The package would create and start a system cluster on port 5432; the
# tests need only the binaries. createcluster.d is read by the package's
# own createcluster.conf, and is no conffile that dpkg would ask about.
mkdir -p /etc/postgresql-common/createcluster.d
echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/agentrun-ci.conf
export DEBIAN_FRONTEND=noninteractive
# The package lists may be missing or old on a fresh machine.
apt-get update -qq >/dev/null 2>&1 || apt-get update
apt-get install -y -qq --no-install-recommends postgresql >/dev/null
