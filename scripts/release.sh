#!/usr/bin/env bash
# Builds a jetfleet release from the checked-out commit:
#
#   dist/release/VERSION/
#     jetfleet_VERSION_<os>_<arch>.tar.gz   agent, coordinator, fleetctl, LICENSE,
#                                           README.md, CHANGELOG.md (linux and
#                                           darwin, amd64 and arm64)
#     jetfleet_VERSION_<os>_<arch>_<cmd>.cdx.json
#                                           each binary's SBOM (CycloneDX)
#     SHA256SUMS                            checksums of the archives and SBOMs
#     RELEASE_NOTES.md                      CHANGELOG.md's section for VERSION
#   images jetfleet/{nats-server,coordinator,agent,fleetctl}:VERSION
#                                           (scripts/images.sh, when Docker answers)
#
# The build is reproducible: static binaries (CGO_ENABLED=0), -trimpath,
# -buildvcs=false, the version and commit stamped with -ldflags -X and
# nothing else that depends on when or where it ran; archives with sorted
# names, the commit's time and no owner; SBOMs without serial or timestamp.
# Two builds of one commit give the same SHA256SUMS (--check builds twice
# and compares: from a copy of the commit's tree at another path, and with
# JETFLEET_CHECK_COLD=1 with an empty build cache too).
#
# The SBOM comes from CycloneDX's Go generator (cyclonedx-gomod), run with
# `go run module@version` through the Go module proxy: nothing to install.
#
# Usage: scripts/release.sh VERSION [--check] [--no-images] [--allow-dirty]
# Env:   JETFLEET_RELEASE_DIST (default dist/release), CYCLONEDX_GOMOD
#        (default github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0),
#        JETFLEET_TARGETS (default "linux/amd64 linux/arm64 darwin/amd64 darwin/arm64")
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,31p' "$0"; }
version=""
check=false
images=true
allow_dirty=false
while [ $# -gt 0 ]; do
  case $1 in
    --check) check=true; shift ;;
    --no-images) images=false; shift ;;
    --allow-dirty) allow_dirty=true; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "release.sh: unknown flag $1" >&2; exit 2 ;;
    *) [ -z "$version" ] || { echo "release.sh: one VERSION only" >&2; exit 2; }; version=$1; shift ;;
  esac
done
log() { echo "release.sh: $*" >&2; }
if ! [[ $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
  log "VERSION must be a semantic version with a leading v (v0.4.0, v1.2.3-rc.1), not '${version}'"
  exit 2
fi
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  $allow_dirty || { log "the work tree has uncommitted changes: commit them, or pass --allow-dirty (the stamped commit then does not describe the build)"; exit 1; }
  log "warning: building with uncommitted changes"
fi
commit=$(git rev-parse HEAD)
# Every timestamp in the artifacts is the commit's.
export SOURCE_DATE_EPOCH
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct HEAD)

# The release notes: CHANGELOG.md's section for VERSION, which must exist.
notes=$(awk -v v="$version" '
  $0 ~ "^## \\[" v "\\]" { on = 1; print; next }
  on && /^## \[/ { exit }
  on { print }' CHANGELOG.md)
if [ -z "$notes" ]; then
  log "CHANGELOG.md has no section '## [$version]': write it first"
  exit 1
fi

sbom_tool=${CYCLONEDX_GOMOD:-github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0}
targets=${JETFLEET_TARGETS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
cmds="agent coordinator fleetctl"
pkg=github.com/jetfleet/jetfleet/internal/version
ldflags="-s -w -buildid= -X $pkg.Version=$version -X $pkg.Commit=$commit"

# build OUT: every target's archive and SBOM, and SHA256SUMS, into OUT.
build() {
  local out=$1 work
  work=$(mktemp -d)
  mkdir -p "$out"
  for target in $targets; do
    local os=${target%/*} arch=${target#*/}
    local name="jetfleet_${version}_${os}_${arch}"
    local dir="$work/$name"
    mkdir -p "$dir"
    for cmd in $cmds; do
      CGO_ENABLED=0 GOOS=$os GOARCH=$arch GOFLAGS=-buildvcs=false \
        go build -trimpath -ldflags="$ldflags" -o "$dir/$cmd" "./cmd/$cmd"
    done
    cp LICENSE README.md CHANGELOG.md "$dir/"
    touch -d "@$SOURCE_DATE_EPOCH" "$dir" "$dir"/*
    tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
      --format=gnu -C "$work" -cf - "$name" | gzip -n -9 >"$out/$name.tar.gz"
    # One SBOM per binary, from the module list the build embedded in
    # it (cyclonedx-gomod bin): exactly what was linked, for this target.
    for cmd in $cmds; do
      go run "$sbom_tool" bin -json -noserial -notimestamp -licenses -version "$version" \
        -output "$out/${name}_$cmd.cdx.json" "$dir/$cmd" 2>"$work/sbom.log" ||
        { cat "$work/sbom.log" >&2; return 1; }
    done
  done
  (cd "$out" && sha256sum -- *.tar.gz *.cdx.json >SHA256SUMS)
  rm -rf "$work"
}

dist=${JETFLEET_RELEASE_DIST:-dist/release}/$version
rm -rf "$dist"
start=$(date +%s)
log "building $version from $commit into $dist"
build "$dist"
printf '%s\n' "$notes" >"$dist/RELEASE_NOTES.md"
log "built in $(( $(date +%s) - start ))s"
cat "$dist/SHA256SUMS"

if $check; then
  # The second build runs in a copy of the commit's tree at another path
  # (what -trimpath must hide), and with JETFLEET_CHECK_COLD=1 with an
  # empty build cache (what reuse of compiled packages could hide).
  again=$(mktemp -d)
  mkdir "$again/src" "$again/out"
  git archive --format=tar "$commit" | tar -x -C "$again/src"
  log "--check: building again in $again/src"
  (
    cd "$again/src"
    if [ "${JETFLEET_CHECK_COLD:-0}" = 1 ]; then export GOCACHE="$again/gocache"; fi
    build "$again/out"
  )
  if diff -u "$dist/SHA256SUMS" "$again/out/SHA256SUMS"; then
    log "--check: the two builds have identical checksums"
    rm -rf "$again"
  else
    log "--check: the two builds differ (kept in $again)"
    exit 1
  fi
fi

if $images; then
  if docker info >/dev/null 2>&1; then
    JETFLEET_VERSION=$version JETFLEET_COMMIT=$commit bash scripts/images.sh --tag "$version"
  else
    log "no Docker engine answers 'docker info': images not built (scripts/images.sh --tag $version later)"
  fi
fi
