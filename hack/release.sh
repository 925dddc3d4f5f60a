#!/usr/bin/env bash
# Builds a release into dist/ (`make release`): for each of PLATFORMS an
# archive per command, dist/checksums.txt over them (sha256sum's format),
# and dist/agentrun.yaml, the krew manifest of the kubectl plugin made from
# plugins/agentrun.yaml.in with the archives' URLs under RELEASE_URL and
# their sha256. It then checks its own output: sha256sum -c, and the
# manifest with krew's validator (hack/tools). Run from the repository root.
#
#   VERSION=v0.2.0 hack/release.sh              # the release
#   hack/release.sh check-manifest              # only render and validate the manifest
#
# The same commit and VERSION give the same bytes: -trimpath, no build ID,
# and archives with the commit's time, owner 0 and sorted names, gzip -n.
# agentrun and kubectl-agentrun are built for every platform; the operator
# (manager) and agentrun-entrypoint only for linux, where their image runs
# (the image, not these archives, is how the operator is installed).
set -euo pipefail
cd "$(dirname "$0")/.."

# The platforms of every release. plugins/agentrun.yaml.in lists the same
# (TestReleasePlatformsAreTheKrewManifests in internal/version).
PLATFORMS="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"
EVERYWHERE="agentrun kubectl-agentrun"
LINUX_ONLY="manager agentrun-entrypoint"

VERSION=${VERSION:-}
RELEASE_URL=${RELEASE_URL:-https://github.com/agentrun/agentrun/releases/download/$VERSION}
RELEASE_URL=${RELEASE_URL%/}
LDFLAGS=${LDFLAGS:-"-X github.com/agentrun/agentrun/internal/version.Version=$VERSION"}
dist=dist
fail() { echo "release: $*" >&2; exit 1; }

# krew's validator, built from hack/tools (from the build cache after the
# first time).
validate() {
  local bin
  bin=$(mktemp -d)/validate-krew-manifest
  go build -modfile=hack/tools/go.mod -o "$bin" sigs.k8s.io/krew/cmd/validate-krew-manifest
  # -skip-install: installing every platform needs kubectl krew and the
  # archives at their URLs.
  "$bin" -manifest "$1" -skip-install 2>&1 | sed 's/^/release: krew: /'
  rm -rf "$(dirname "$bin")"
}

# manifest VERSION URL DIR [sha256 per platform as os_arch=sum ...]: writes
# DIR/agentrun.yaml from the template.
manifest() {
  local version=$1 url=$2 out=$3/agentrun.yaml
  shift 3
  local expr=(-e '/^#/d' -e "s|@VERSION@|$version|g" -e "s|@RELEASE_URL@|$url|g")
  for kv in "$@"; do
    expr+=(-e "s|@SHA256_${kv%%=*}@|${kv#*=}|g")
  done
  sed "${expr[@]}" plugins/agentrun.yaml.in >"$out"
  ! grep -n '@[A-Za-z0-9_]*@' "$out" || fail "$out: placeholders left (a platform without an archive?)"
}

if [ "${1:-}" = check-manifest ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  sums=()
  for p in $PLATFORMS; do sums+=("${p/\//_}=$(printf '%064d' 0)"); done
  manifest v0.0.0 https://example.com/releases/v0.0.0 "$tmp" "${sums[@]}"
  validate "$tmp/agentrun.yaml"
  echo "release: plugins/agentrun.yaml.in renders a manifest krew validates"
  exit 0
fi

# krew wants a semantic version with its v; so does a release.
[[ $VERSION =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$ ]] ||
  fail "VERSION=$VERSION: want a tag such as v0.2.0 (make release VERSION=v0.2.0)"
[[ $RELEASE_URL == https://* ]] || fail "RELEASE_URL=$RELEASE_URL: krew downloads over https only"

# The archives' files get the commit's time, so a rebuild matches.
mtime=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
rm -rf "$dist"
mkdir -p "$dist"
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
license=()
[ -f LICENSE ] && license=(LICENSE)

sums=()
for p in $PLATFORMS; do
  os=${p%/*} arch=${p#*/}
  cmds=$EVERYWHERE
  [ "$os" = linux ] && cmds="$cmds $LINUX_ONLY"
  for c in $cmds; do
    dir=$build/${c}_${os}_$arch
    mkdir -p "$dir"
    echo "release: $c $os/$arch"
    CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=auto \
      -ldflags "$LDFLAGS -s -w -buildid=" -o "$dir/$c" "./cmd/$c"
    [ ${#license[@]} = 0 ] || cp LICENSE "$dir/"
    archive=${c}_${VERSION}_${os}_$arch.tar.gz
    tar -C "$dir" --mtime="@$mtime" --owner=0 --group=0 --numeric-owner --sort=name \
      -cf - "$c" "${license[@]}" | gzip -n -9 >"$dist/$archive"
    if [ "$c" = kubectl-agentrun ]; then
      sums+=("${os}_$arch=$(sha256sum "$dist/$archive" | cut -d' ' -f1)")
    fi
  done
done

(cd "$dist" && sha256sum -- *.tar.gz >checksums.txt && sha256sum --quiet -c checksums.txt) ||
  fail "dist/checksums.txt does not check"
manifest "$VERSION" "$RELEASE_URL" "$dist" "${sums[@]}"
validate "$dist/agentrun.yaml"
[ ${#license[@]} = 1 ] || echo "release: warning: no LICENSE in the repository; krew-index wants one in each archive" >&2
echo "release: $VERSION in $dist/:"
ls -l "$dist"
