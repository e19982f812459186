#!/usr/bin/env bash
# Kill-a-node run on the secured docker-compose cluster:
#
#   1. build the images (scripts/images.sh: static binaries, FROM scratch)
#   2. fleetctl auth init: nkeys per role, TLS
#   3. docker compose up: 3 NATS nodes (R3), two coordinators, 3 agents
#   4. submit a 2,000-item job: a busybox shell step, then a flaky handler
#      (retried network errors, ~2% permanent failures)
#   5. mid-job, kill the JetStream meta leader and one agent (SIGKILL),
#      let the job go on without them, then start them again; then kill
#      the leading coordinator (SIGKILL), check that the other one takes
#      the lease and the job goes on, and start the killed one again
#   6. wait for the job to end; print its final status; check that every
#      item succeeded or was dead-lettered exactly once, against the
#      results, DLQ and work streams (none lost, none counted twice), and
#      that the restarted node caught up (identical replicas on all nodes)
#   7. docker compose down -v, on every exit path
#
# Usage: scripts/compose-e2e.sh [--keep]   (--keep leaves the cluster up)
# Env:   E2E_ITEMS (default 2000)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 ))s"; }
say() { echo "== [$(elapsed)] $*"; }

keep=false
[ "${1:-}" = "--keep" ] && keep=true
items=${E2E_ITEMS:-2000}

if docker compose version >/dev/null 2>&1; then
  compose_cmd=(docker compose)
elif command -v docker-compose >/dev/null; then
  compose_cmd=(docker-compose)
else
  echo "compose-e2e: neither 'docker compose' nor 'docker-compose' answers" >&2
  exit 1
fi

project="jetfleet-e2e-$(date +%s)-$$"
work=$(mktemp -d /tmp/jetfleet-e2e.XXXXXX)
chmod 755 "$work"
export JETFLEET_TAG=${JETFLEET_TAG:-dev}
export JETFLEET_DIST=${JETFLEET_DIST:-$root/dist/images}
export FLEET_AUTH_DIR="$work/auth"
export FLEET_NATS_PUBLISH="127.0.0.1:" # a free host port: CI may already use 4222
export FLEET_ACK_WAIT=10s               # a killed agent's items come back after 10s
compose() { "${compose_cmd[@]}" -p "$project" -f "$root/docker-compose.yml" "$@"; }

status=1
cleanup() {
  local rc=$?
  [ "$status" -eq 0 ] || rc=${rc/#0/1}
  if [ "$rc" -ne 0 ] && [ -n "${net:-}" ]; then
    echo "== logs (last lines of each service)"
    compose logs --no-color --tail 15 2>&1 | tail -120 || true
  fi
  if $keep; then
    echo "== --keep: cluster left up; stop it with: ${compose_cmd[*]} -p $project down -v"
  else
    compose down -v --remove-orphans >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
  if [ "$rc" -eq 0 ]; then
    echo "== compose-e2e: PASS in $(elapsed)"
  else
    echo "== compose-e2e: FAIL (exit $rc) after $(elapsed)"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "compose: ${compose_cmd[*]} ($("${compose_cmd[@]}" version --short 2>/dev/null || "${compose_cmd[@]}" version | head -1)), project $project"
say "building images"
bash scripts/images.sh
CGO_ENABLED=0 go build -trimpath -o "$JETFLEET_DIST/bin/composecheck" ./scripts/composecheck
say "images built"

"$JETFLEET_DIST/bin/fleetctl" auth init "$FLEET_AUTH_DIR" --tls --server-dir /etc/nats/auth >/dev/null
chmod -R a+rX "$FLEET_AUTH_DIR" # the containers' users need to read their nkey

job="e2e-$(date +%s)"
{
  echo "id: $job"
  echo "pool: default"
  echo "retry_budget: \"100%\""
  echo "agent_template:"
  echo "  - name: work"
  echo "    shell: 'sleep 0.5; test -n \"\$ITEM_ID\"'" # busybox sh in the agent image
  echo "    timeout: 10s"
  echo "  - name: flaky"
  echo "    handler: flaky"
  echo "    with: {fail_rate: 0.25, permanent_rate: 0.02, seed: 42}"
  echo "    retry_config: {attempts: 6, backoff: exponential, initial_delay: 200ms, max_delay: 2s, jitter: true}"
  echo "items:"
  for ((i = 0; i < items; i++)); do printf '  - {id: item-%05d}\n' "$i"; done
} >"$work/job.yaml"

say "starting 3 NATS nodes, two coordinators and 3 agents"
if ! compose up -d --scale agent=3 >"$work/up.log" 2>&1; then
  cat "$work/up.log" >&2
  exit 1
fi
# The coordinator's one network is where clients and agents are; the NATS
# nodes' monitoring ports are on the monitoring network only.
net=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}' "$(compose ps -q coordinator-1)")
mon=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' "$(compose ps -q nats-1)" | tr ' ' '\n' | grep '_monitoring$')
urls="tls://nats-1:4222,tls://nats-2:4222,tls://nats-3:4222"
monitoring="http://nats-1-monitoring:8222 http://nats-2-monitoring:8222 http://nats-3-monitoring:8222"

# tool NKEY [docker run options...] -- ARGS: fleetctl's image on the
# clients' network (or $tool_net), as the user whose seed is /auth/NKEY.nk.
tool() {
  local nk=$1; shift
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  docker run --rm --network "${tool_net:-$net}" \
    -v "$work:/work:ro" -v "$FLEET_AUTH_DIR:/auth:ro" -v "$JETFLEET_DIST/bin/composecheck:/composecheck:ro" \
    -e NATS_URL="$urls" -e NATS_TLS_CA=/auth/ca.pem -e NATS_NKEY="/auth/$nk.nk" \
    "${opts[@]}" "jetfleet/fleetctl:$JETFLEET_TAG" "$@"
}
fleetctl() { local nk=$1; shift; tool "$nk" -- "$@"; }
check() { local nk=$1; shift; tool "$nk" --entrypoint /composecheck -- "$@"; }
# monitor ARGS: composecheck on the monitoring network (leader, converged).
monitor() { tool_net=$mon check operator "$@"; }

say "waiting for the cluster and the coordinator's API"
ready=false
for _ in $(seq 90); do
  if fleetctl operator list --json --timeout 2s >/dev/null 2>&1; then ready=true; break; fi
  sleep 1
done
$ready || { echo "compose-e2e: the coordinator's API did not answer within 90s" >&2; exit 1; }
say "where agents run, the NATS monitoring and cluster ports are out of reach"
check operator unreachable http://nats-1:8222 http://nats-2:8222 http://nats-3:8222 \
  tcp://nats-1:6222 tcp://nats-2:6222 tcp://nats-3:6222
say "ready; submitting $job ($items items) as the submitter"
fleetctl submitter submit /work/job.yaml >/dev/null
check operator wait "$job" --done $((items * 10 / 100)) --timeout 3m

leader=$(monitor leader $monitoring)
leader_id=$(compose ps -q "$leader")
say "killing the JetStream meta leader, $leader (SIGKILL)"
docker kill "$leader_id" >/dev/null
node_down=$(date +%s)
check operator wait "$job" --done $((items * 30 / 100)) --timeout 3m
say "meta leader now: $(monitor leader $monitoring || echo none)"

agent_id=$(compose ps -q agent | sed -n 1p) # not head: under pipefail its early exit can kill compose with SIGPIPE (exit 141)
agent_name=$(docker inspect -f '{{.Name}}' "$agent_id" | tr -d /)
say "killing agent $agent_name (SIGKILL): its items come back after AckWait ($FLEET_ACK_WAIT)"
docker kill "$agent_id" >/dev/null
agent_down=$(date +%s)
check operator wait "$job" --done $((items * 55 / 100)) --timeout 3m

now=$(date +%s)
say "starting $leader (down $((now - node_down))s) and $agent_name (down $((now - agent_down))s) again"
docker start "$leader_id" "$agent_id" >/dev/null
check operator wait "$job" --done $((items * 65 / 100)) --timeout 3m

# The lease's holder is <hostname>-<pid>-<random>; the hostname is the
# service's (docker-compose.yml).
holder=$(check coordinator holder)
coord=$(echo "$holder" | cut -d- -f1-2)
coord_id=$(compose ps -q "$coord")
say "killing the leading coordinator, $coord (SIGKILL; lease holder $holder)"
docker kill "$coord_id" >/dev/null
coord_down=$(date +%s)
say "lease taken by $(check coordinator holder --wait-not "$coord-" --timeout 1m) after $(( $(date +%s) - coord_down ))s"
check operator wait "$job" --done $((items * 80 / 100)) --timeout 3m
say "starting $coord again (down $(( $(date +%s) - coord_down ))s)"
docker start "$coord_id" >/dev/null
check operator wait "$job" --timeout 5m
say "job ended"

# Exit 1 means the job failed (some items were dead-lettered); retry only
# when no status came back (the cluster may still be settling).
for _ in $(seq 10); do
  fleetctl operator status "$job" --json >"$work/status.json" 2>"$work/status.err" || true
  grep -q '"id"' "$work/status.json" && break
  cat "$work/status.err" >&2
  sleep 2
done
echo "== final job status (fleetctl status $job --json):"
cat "$work/status.json"
if fleetctl operator dlq stats --job "$job" >"$work/dlq-stats.txt" 2>/dev/null; then
  echo "== fleetctl dlq stats --job $job:"
  cat "$work/dlq-stats.txt"
fi
say "checking that $leader caught up: every node holds the same copy of every stream"
monitor converged --timeout 90s $monitoring
say "auditing the streams (coordinator's role: results, DLQ, work)"
check coordinator verify "$job" --items "$items" --status /work/status.json
status=0
