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
lib_name=e2e
source "$(dirname "$0")/compose-lib.sh"
items=${E2E_ITEMS:-2000}

lib_build
job="e2e-$(date +%s)"
lib_job "$job" "$items" 0.5
lib_up
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

lib_audit "$job" "$items" 90s
status=0
