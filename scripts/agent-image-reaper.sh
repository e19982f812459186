#!/usr/bin/env bash
# Checks that the agent image cleans up after its shell steps: the agent is
# PID 1 of its FROM-scratch container, with no init, so it must kill what
# steps leave running and reap every orphan itself.
#
#   1. build the images (scripts/images.sh)
#   2. start a NATS server, a coordinator and one agent container on a
#      private network (no auth: nothing leaves the host)
#   3. run a job whose steps daemonise grandchildren (setsid + double fork,
#      nohup), leave an orphan that exits on its own (a zombie unless
#      reaped), print their environment, and one that hangs past its timeout
#   4. only the agent may be left in its container (docker top), with no
#      child, live or zombie (the host's process table: the script runs on
#      the docker host); the steps' environment held none of the agent's
#      NATS settings
#   5. remove everything, on every exit path
#
# Usage: scripts/agent-image-reaper.sh
# Env:   JETFLEET_TAG (default reaper-check), JETFLEET_DIST (default dist/images)
set -euo pipefail
cd "$(dirname "$0")/.."
export JETFLEET_TAG=${JETFLEET_TAG:-reaper-check}
export JETFLEET_DIST=${JETFLEET_DIST:-$(pwd)/dist/images}
run="jetfleet-reaper-$$"
work=$(mktemp -d /tmp/jetfleet-reaper.XXXXXX)
chmod 755 "$work"
say() { echo "== $*"; }

status=1
cleanup() {
  local rc=$?
  [ "$status" -eq 0 ] || rc=${rc/#0/1}
  if [ "$rc" -ne 0 ]; then
    for c in nats coordinator agent; do
      echo "== $c logs"; docker logs --tail 20 "$run-$c" 2>&1 || true
    done
  fi
  docker rm -f "$run-nats" "$run-coordinator" "$run-agent" >/dev/null 2>&1 || true
  docker network rm "$run" >/dev/null 2>&1 || true
  rm -rf "$work"
  [ "$rc" -eq 0 ] && echo "== agent-image-reaper: PASS" || echo "== agent-image-reaper: FAIL"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "building images (tag $JETFLEET_TAG)"
bash scripts/images.sh >/dev/null

docker network create "$run" >/dev/null
docker run -d --name "$run-nats" --network "$run" --network-alias nats \
  "jetfleet/nats-server:$JETFLEET_TAG" -js -sd /data >/dev/null
docker run -d --name "$run-coordinator" --network "$run" -e NATS_URL=nats://nats:4222 \
  -e FLEET_POOLS=default "jetfleet/coordinator:$JETFLEET_TAG" >/dev/null
# NATS_PASSWORD and FLEET_SECRET stand for the agent's credentials: no step
# may see them.
docker run -d --name "$run-agent" --network "$run" -e NATS_URL=nats://nats:4222 \
  -e NATS_PASSWORD=hunter2-not-for-steps -e FLEET_SECRET=not-for-steps \
  -e FLEET_STEP_TIMEOUT=1h "jetfleet/agent:$JETFLEET_TAG" >/dev/null

cat >"$work/job.yaml" <<'EOF'
id: reaper-check
items: [{id: setsid}, {id: nohup}, {id: zombie}, {id: hang}, {id: env}]
agent_template:
  - shell: |
      case ${item_id} in
        setsid) setsid sh -c 'sleep 1000 &' ;;
        nohup) nohup sleep 1000 >/dev/null 2>&1 & ;;
        zombie) setsid sh -c 'sleep 0.1 &'; sleep 0.5 ;;
        hang) setsid sh -c 'sleep 1000 &'; sleep 1000 ;;
        env) env | grep -E '^(NATS|FLEET)_|hunter2|not-for-steps' && exit 1; exit 0 ;;
      esac
    timeout: 3s
    retry_config: {attempts: 1}
EOF

fleetctl() {
  docker run --rm --network "$run" -v "$work:/work:ro" -e NATS_URL=nats://nats:4222 \
    "jetfleet/fleetctl:$JETFLEET_TAG" "$@"
}
say "waiting for the coordinator"
for _ in $(seq 60); do
  fleetctl list --json >/dev/null 2>&1 && break
  sleep 1
done
say "running the job"
fleetctl submit /work/job.yaml --wait --json >"$work/status.json" || true
grep -E '"(succeeded|dead_lettered)":|"message":' "$work/status.json" || true

# docker top lists the container's cgroup, which a zombie has left: look
# for the agent's children, live or dead, in the host's process table.
agent_pid=$(docker inspect -f '{{.State.Pid}}' "$run-agent")
docker top "$run-agent" -o pid,stat,args
left=$(ps -eo pid=,ppid=,stat=,args= | awk -v p="$agent_pid" '$2 == p')
if [ -n "$left" ]; then
  echo "agent-image-reaper: the agent (host pid $agent_pid) still has children (Z = zombie):" >&2
  echo "$left" >&2
  exit 1
fi
if [ "$(docker top "$run-agent" -o pid | tail -n +2 | wc -l)" -ne 1 ]; then
  echo "agent-image-reaper: processes other than the agent are left in its container" >&2
  exit 1
fi
grep -q '"succeeded": 4,' "$work/status.json" || { echo "agent-image-reaper: want 4 items succeeded (hang times out)" >&2; exit 1; }
status=0
