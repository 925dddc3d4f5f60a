#!/usr/bin/env bash
# Installs Chromium from Debian's packages when the machine has none, for
# the console's browser tests (internal/console drives it headless with
# chromedp, on loopback; nothing is fetched from outside the machine).
# Does nothing when a Chromium is already there. About 100 MB to download
# on a fresh Debian 12; under CI=true the browser tests fail rather than
# skip without it.
set -euo pipefail

for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null; then
    exit 0
  fi
done
if [ "$(id -u)" != 0 ]; then
  echo "chromium-deps: need root to install chromium (the console's browser tests fail under CI=true without it)" >&2
  exit 1
fi
echo "chromium-deps: installing chromium from Debian" >&2
export DEBIAN_FRONTEND=noninteractive
# The package lists may be missing or old on a fresh machine.
apt-get update -qq >/dev/null 2>&1 || apt-get update
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
