#!/usr/bin/env bash
# Runs hack/e2e/imagebuilder (its own Go module, with go-containerregistry) from the
# caller's directory, so relative paths in -add work. Arguments go to the builder:
#
#   hack/e2e/imagebuilder.sh -o bin/operator.tar -t agentrun.local/operator:e2e \
#     -add bin/manager:/manager -entrypoint /manager -user 65532:65532
#   hack/e2e/load-image.sh bin/operator.tar      # into the running e2e node
#
# Run with no arguments for every flag.
set -euo pipefail
# shellcheck source=hack/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

bin="$CACHE/e2e/bin/imagebuilder"
mkdir -p "$(dirname "$bin")"
# go build is a no-op when nothing changed; it keeps go.mod of the main module out of it.
(cd "$E2E_ROOT/hack/e2e/imagebuilder" && GOFLAGS=-mod=mod go build -o "$bin" .)
exec "$bin" "$@"
