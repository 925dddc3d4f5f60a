#!/usr/bin/env bash
# Builds a release into dist/ (`make release`): for each of PLATFORMS an
# archive per command with the LICENSE, a CycloneDX SBOM of each archive's
# binary (cyclonedx-gomod, from the build information Go embeds), the Helm
# chart packaged for an OCI registry (agentrun-X.Y.Z.tgz), dist/checksums.txt
# over all of them (sha256sum's format), and dist/agentrun.yaml, the krew
# manifest of the kubectl plugin made from plugins/agentrun.yaml.in with the
# archives' URLs under RELEASE_URL and their sha256. It then checks its own
# output: sha256sum -c, the manifest with krew's validator, every SBOM names
# its binary's modules. Everything runs offline, from the Go module cache.
#
#   VERSION=v0.2.0 hack/release.sh    # the release (.github/workflows/release.yaml runs this on a tag)
#   hack/release.sh snapshot          # the same, as v0.0.0-snapshot.<commit>, to try it
#   hack/release.sh check             # seconds, no cross build: LICENSE, the krew manifest, actionlint (make verify)
#
# What it does not do is publish: pushing the operator's image (built from
# the Dockerfile by buildx), pushing the chart to ghcr.io as an OCI
# artifact, keyless signing with cosign and the provenance attestations
# need GitHub's OIDC token and a registry, so only the workflow does them.
#
# The same commit and VERSION give the same bytes: -trimpath, no build ID,
# archives with the commit's time, owner 0 and sorted names, gzip -n, SBOMs
# without serial number or timestamp.
# kubectl-agentrun is built for every platform (kubectl-agentrun.exe on
# windows), agentrun for linux and darwin, the operator (manager) and
# agentrun-entrypoint only for linux, where their image runs (the image,
# not these archives, is how the operator is installed).
set -euo pipefail
cd "$(dirname "$0")/.."

# The platforms of every release. plugins/agentrun.yaml.in lists the same
# (TestReleasePlatformsAreTheKrewManifests in internal/version).
PLATFORMS="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64"
EVERYWHERE="kubectl-agentrun"
# agentrun runs tools as local process groups (agentrun local, make dev),
# which it does only where there are POSIX signals.
UNIX_ONLY="agentrun"
LINUX_ONLY="manager agentrun-entrypoint"

mode=${1:-release}
case $mode in
  release | check) ;;
  check-manifest) mode=check ;;
  snapshot)
    # A version krew and Helm accept, that no tag will ever be.
    VERSION=v0.0.0-snapshot.$(git rev-parse --short=12 HEAD)
    RELEASE_URL=${RELEASE_URL:-https://example.invalid/agentrun/$VERSION}
    LDFLAGS="-X github.com/agentrun/agentrun/internal/version.Version=$VERSION"
    ;;
  *) echo "usage: VERSION=vX.Y.Z $0 | $0 snapshot | $0 check" >&2; exit 2 ;;
esac

VERSION=${VERSION:-}
RELEASE_URL=${RELEASE_URL:-https://github.com/agentrun/agentrun/releases/download/$VERSION}
RELEASE_URL=${RELEASE_URL%/}
LDFLAGS=${LDFLAGS:-"-X github.com/agentrun/agentrun/internal/version.Version=$VERSION"}
dist=dist
fail() { echo "release: $*" >&2; exit 1; }
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT

# tool NAME PACKAGE: builds a tool of hack/tools into $tools (from the
# build cache after the first time).
tool() {
  [ -x "$tools/$1" ] || go build -modfile=hack/tools/go.mod -o "$tools/$1" "$2"
}

# krew's validator.
validate() {
  tool validate-krew-manifest sigs.k8s.io/krew/cmd/validate-krew-manifest
  # -skip-install: installing every platform needs kubectl krew and the
  # archives at their URLs.
  "$tools/validate-krew-manifest" -manifest "$1" -skip-install 2>&1 | sed 's/^/release: krew: /'
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

# krew-index wants the licence in every archive; so do the licence's terms.
[ -f LICENSE ] || fail "no LICENSE in the repository: every archive carries it"

if [ "$mode" = check ]; then
  sums=()
  for p in $PLATFORMS; do sums+=("${p/\//_}=$(printf '%064d' 0)"); done
  manifest v0.0.0 https://example.com/releases/v0.0.0 "$tools" "${sums[@]}"
  validate "$tools/agentrun.yaml"
  # The workflow that publishes a tag cannot run here; actionlint checks
  # its syntax, expressions and the inputs of the actions it uses.
  tool actionlint github.com/rhysd/actionlint/cmd/actionlint
  "$tools/actionlint" -no-color .github/workflows/*.yaml || fail "actionlint found problems in .github/workflows"
  echo "release: LICENSE is there, plugins/agentrun.yaml.in renders a manifest krew validates, actionlint passes"
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
tool cyclonedx-gomod github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod
tool helm helm.sh/helm/v3/cmd/helm

sums=()
for p in $PLATFORMS; do
  os=${p%/*} arch=${p#*/}
  ext=
  [ "$os" = windows ] && ext=.exe
  cmds=$EVERYWHERE
  [ "$os" = windows ] || cmds="$cmds $UNIX_ONLY"
  [ "$os" = linux ] && cmds="$cmds $LINUX_ONLY"
  for c in $cmds; do
    dir=$tools/${c}_${os}_$arch
    mkdir -p "$dir"
    echo "release: $c $os/$arch"
    CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=auto \
      -ldflags "$LDFLAGS -s -w -buildid=" -o "$dir/$c$ext" "./cmd/$c"
    cp LICENSE "$dir/"
    archive=${c}_${VERSION}_${os}_$arch.tar.gz
    tar -C "$dir" --mtime="@$mtime" --owner=0 --group=0 --numeric-owner --sort=name \
      -cf - "$c$ext" LICENSE | gzip -n -9 >"$dist/$archive"
    # The SBOM lists the modules linked into the binary, read from the
    # build information Go embeds (go version -m), so it is the binary's
    # and not the module's whole graph.
    "$tools/cyclonedx-gomod" bin -json -noserial -notimestamp -version "$VERSION" \
      -output "$dist/$archive.sbom.cdx.json" "$dir/$c$ext" 2>/dev/null ||
      fail "cyclonedx-gomod could not describe $c for $os/$arch"
    sbom=$dist/$archive.sbom.cdx.json
    grep -qF "\"bom-ref\": \"pkg:golang/github.com/agentrun/agentrun@$VERSION?type=module#cmd/$c\"" "$sbom" ||
      fail "$archive.sbom.cdx.json does not describe cmd/$c at $VERSION"
    # One component per module linked in, besides the command itself.
    deps=$(go version -m "$dir/$c$ext" | grep -c $'^\tdep\t' || true)
    [ "$(grep -c '"purl"' "$sbom")" = $((deps + 1)) ] ||
      fail "$archive.sbom.cdx.json lists $(($(grep -c '"purl"' "$sbom") - 1)) modules, the binary links $deps"
    if [ "$c" = kubectl-agentrun ]; then
      sums+=("${os}_$arch=$(sha256sum "$dist/$archive" | cut -d' ' -f1)")
    fi
  done
done

# The chart, versioned as the release (without its v, as Helm writes
# versions); its image tag defaults to appVersion, the tag the workflow
# pushes the operator's image under. The workflow pushes this file to
# oci://ghcr.io/agentrun/charts.
"$tools/helm" package charts/agentrun --version "${VERSION#v}" --app-version "${VERSION#v}" \
  --destination "$tools/chart" >/dev/null || fail "helm package failed"
# helm package writes the time of packaging into the archive; repack it
# with the commit's, so a rebuild gives the same bytes.
mkdir -p "$tools/chart/x"
tar -C "$tools/chart/x" -xzf "$tools/chart/agentrun-${VERSION#v}.tgz"
tar -C "$tools/chart/x" --mtime="@$mtime" --owner=0 --group=0 --numeric-owner --sort=name \
  -cf - agentrun | gzip -n -9 >"$dist/agentrun-${VERSION#v}.tgz"
"$tools/helm" show chart "$dist/agentrun-${VERSION#v}.tgz" | grep -qx "version: ${VERSION#v}" ||
  fail "agentrun-${VERSION#v}.tgz is not a chart of version ${VERSION#v}"

(cd "$dist" && sha256sum -- *.tar.gz *.sbom.cdx.json *.tgz >checksums.txt && sha256sum --quiet -c checksums.txt) ||
  fail "dist/checksums.txt does not check"
manifest "$VERSION" "$RELEASE_URL" "$dist" "${sums[@]}"
validate "$dist/agentrun.yaml"
echo "release: $VERSION in $dist/:"
ls -l "$dist"
