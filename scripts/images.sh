#!/usr/bin/env bash
# Builds jetfleet's container images with no registry: static binaries
# (CGO_ENABLED=0) are built here, with the Go build cache, and copied into
# FROM scratch images, so Docker pulls nothing and needs no Go toolchain.
#
#   coordinator, agent, fleetctl   from this module
#   nats-server                    from the Go module go.mod pins
#   busybox (agent image only)     Debian's busybox-static, as /bin/sh and
#                                  its applets for shell steps
#
# Usage: scripts/images.sh [--tag TAG] [--binaries-only]
# Env:   JETFLEET_TAG (default dev), JETFLEET_DIST (default dist/images),
#        JETFLEET_VERSION and JETFLEET_COMMIT: stamped into the binaries
#        (scripts/release.sh sets them; `--version` prints them)
# Images: jetfleet/{nats-server,coordinator,agent,fleetctl}:TAG
set -euo pipefail
cd "$(dirname "$0")/.."

tag=${JETFLEET_TAG:-dev}
dist=${JETFLEET_DIST:-dist/images}
binaries_only=false
while [ $# -gt 0 ]; do
  case $1 in
    --tag) tag=$2; shift 2 ;;
    --binaries-only) binaries_only=true; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "images.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

log() { echo "images.sh: $*" >&2; }

# A static busybox for the agent image's shell steps. Debian's busybox-static
# puts one at /bin/busybox; install it when missing (CI runs as root).
find_busybox() {
  local b
  for b in "${BUSYBOX:-}" /bin/busybox /usr/bin/busybox; do
    [ -n "$b" ] && [ -x "$b" ] || continue
    if file -L "$b" 2>/dev/null | grep -q 'statically linked'; then
      echo "$b"; return 0
    fi
  done
  return 1
}
busybox=$(find_busybox || true)
if [ -z "$busybox" ]; then
  log "no static busybox found: installing Debian's busybox-static"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if ! command -v file >/dev/null; then
    $sudo apt-get install -y -q file >/dev/null || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q file >/dev/null; }
  fi
  if ! $sudo apt-get install -y -q busybox-static >/dev/null 2>&1; then
    $sudo apt-get update -q >/dev/null
    $sudo apt-get install -y -q busybox-static >/dev/null
  fi
  busybox=$(find_busybox) || { log "busybox-static installed but no static busybox found"; exit 1; }
fi

mkdir -p "$dist/bin"
export CGO_ENABLED=0 GOOS=linux GOFLAGS="${GOFLAGS:--buildvcs=false}"
ldflags="-s -w -buildid="
vpkg=github.com/jetfleet/jetfleet/internal/version
[ -z "${JETFLEET_VERSION:-}" ] || ldflags="$ldflags -X $vpkg.Version=$JETFLEET_VERSION"
[ -z "${JETFLEET_COMMIT:-}" ] || ldflags="$ldflags -X $vpkg.Commit=$JETFLEET_COMMIT"
build() { # output, package
  go build -trimpath -ldflags="$ldflags" -o "$dist/bin/$1" "$2"
}
start=$(date +%s)
log "building static binaries into $dist/bin"
build coordinator ./cmd/coordinator
build agent ./cmd/agent
build fleetctl ./cmd/fleetctl
# The server at the version go.mod pins, from the module cache.
build nats-server github.com/nats-io/nats-server/v2
log "binaries built in $(( $(date +%s) - start ))s ($(go list -m -f '{{.Path}} {{.Version}}' github.com/nats-io/nats-server/v2))"
$binaries_only && exit 0

# One small build context per image: only what that image copies.
for role in nats-server coordinator agent fleetctl; do
  ctx="$dist/ctx/$role"
  rm -rf "$ctx"
  mkdir -p "$ctx/tmp"
  cp "$dist/bin/$role" "$ctx/$role"
done
mkdir -p "$dist/ctx/agent/bin"
cp "$busybox" "$dist/ctx/agent/bin/busybox"
for applet in $("$busybox" --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$dist/ctx/agent/bin/$applet"
done

export DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0} # the classic builder needs nothing pulled either
for role in nats-server coordinator agent fleetctl; do
  log "image jetfleet/$role:$tag"
  if ! docker build -q -t "jetfleet/$role:$tag" -f "deploy/docker/$role.Dockerfile" "$dist/ctx/$role" >"$dist/build-$role.log" 2>&1; then
    cat "$dist/build-$role.log" >&2
    exit 1
  fi
done
log "images built in $(( $(date +%s) - start ))s"
