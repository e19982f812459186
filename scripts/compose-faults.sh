#!/usr/bin/env bash
# Partitions and pauses on the secured docker-compose cluster (the faults
# Jepsen used on NATS 2.12.1), one after the other against one job:
#
#   1. build the images, auth init, compose up (3 NATS nodes R3, two
#      coordinators, 3 agents), as scripts/compose-e2e.sh does
#   2. submit a 3,000-item job (a 2 s busybox step, then the flaky handler)
#   3. at 5 %, 15 %, 30 %, 45 % and 60 % done, one fault each:
#        pause     docker pause of the leading coordinator for 12 s (its
#                  lease is 4 s): the other takes over
#        node      a NATS node that is not the meta leader cut off the
#                  cluster network for 20 s
#        meta      the JetStream meta leader cut off the cluster network
#                  for 20 s
#        clients   the leading coordinator cut off the clients' network for 20 s
#        killall   all three NATS nodes SIGKILLed at once, then started
#      while each fault lasts and 15 s after, `composecheck probe` asks for
#      the job's status every 0.5 s with a 3 s timeout (through a client
#      that leaves a server cut off the cluster, as fleetctl's does): at
#      most 2 probes may fail per fault (killall: of those made while a
#      node was up), and the done count must never go back, whatever an
#      answer's as_of says (only the leader answers status)
#   4. wait for the end; check exact counts against the results, DLQ and
#      work streams (no item lost, none counted twice) and that every node
#      holds the same copy of every stream
#   5. print a line per fault (probes, failures, time to resume) and the
#      coordinator takeover times; docker compose down -v on every exit path
#
# Usage: scripts/compose-faults.sh [--keep]   (--keep leaves the cluster up)
# Env:   FAULTS_ITEMS (default 3000)
lib_name=faults
source "$(dirname "$0")/compose-lib.sh"
lib_report="$work/report.txt" # printed by cleanup after the result
items=${FAULTS_ITEMS:-3000}

lib_build
job="faults-$(date +%s)"
lib_job "$job" "$items" 2
lib_up
say "ready; submitting $job ($items items) as the submitter"
fleetctl submitter submit /work/job.yaml >/dev/null
report=$lib_report
: >"$report"

# probe_during LABEL SECONDS [PROBE FLAGS]: status probes in the background for SECONDS.
probe_during() {
  local label=$1 secs=$2; shift 2
  check operator probe "$job" --label "$label" --for "${secs}s" "$@" >>"$report" 2>"$work/probe-$label.err" &
  probe_pid=$!
}
probe_failed=""
probe_result() {
  wait "$probe_pid" || probe_failed+=" $1"
  tail -1 "$report"
  # Each failed probe: when, on which server, what it got.
  sed 's/^/    /' "$work/probe-$1.err" | tee -a "$report" >&2
}
leading_coordinator() { check coordinator holder | cut -d- -f1-2; }
# takeover COORD: seconds until a coordinator other than COORD holds the lease.
takeover() {
  local t=$(date +%s)
  local by
  by=$(check coordinator holder --wait-not "$1-" --timeout 2m)
  echo "$(( $(date +%s) - t ))s (by $(echo "$by" | cut -d- -f1-2))"
}
# disconnect_for NODE_SERVICE NETWORK ALIAS SECONDS: disconnect, wait, reconnect.
disconnect_for() {
  local id; id=$(compose ps -q "$1")
  docker network disconnect "$2" "$id"
  sleep "$4"
  if [ -n "$3" ]; then docker network connect --alias "$3" "$2" "$id"; else docker network connect "$2" "$id"; fi
}

check operator wait "$job" --done $((items * 5 / 100)) --timeout 5m
coord=$(leading_coordinator)
say "fault 1 (pause): docker pause $coord, the leading coordinator, for 12 s"
probe_during pause 30
docker pause "$(compose ps -q "$coord")" >/dev/null
echo "pause: lease taken over after $(takeover "$coord")" >>"$report"
sleep 8 # the pause lasts 12 s or more, the takeover's wait included
docker unpause "$(compose ps -q "$coord")" >/dev/null
probe_result pause

check operator wait "$job" --done $((items * 15 / 100)) --timeout 5m
meta=$(monitor leader $monitoring)
node=nats-1; [ "$meta" = nats-1 ] && node=nats-2
say "fault 2 (node): $node (not the meta leader, $meta) cut off the cluster network for 20 s"
probe_during node 35
disconnect_for "$node" "$clusternet" "$node-cluster" 20
probe_result node

check operator wait "$job" --done $((items * 30 / 100)) --timeout 5m
meta=$(monitor leader $monitoring)
say "fault 3 (meta): the meta leader, $meta, cut off the cluster network for 20 s"
probe_during meta 35
disconnect_for "$meta" "$clusternet" "$meta-cluster" 20
probe_result meta

check operator wait "$job" --done $((items * 45 / 100)) --timeout 5m
coord=$(leading_coordinator)
say "fault 4 (clients): the leading coordinator, $coord, cut off the clients' network for 20 s"
probe_during clients 35
( sleep 1; echo "clients: lease taken over after $(takeover "$coord")" >>"$report" ) &
disconnect_for "$coord" "$net" "" 20
probe_result clients

check operator wait "$job" --done $((items * 60 / 100)) --timeout 5m
say "fault 5 (killall): SIGKILL of nats-1, nats-2 and nats-3 at once"
# While no node is up there is nothing to answer: those probes are
# reported apart; the check is on the probes made with a server up.
probe_during killall 45 --not-while-down
docker kill "$(compose ps -q nats-1)" "$(compose ps -q nats-2)" "$(compose ps -q nats-3)" >/dev/null
docker start "$(compose ps -q nats-1)" "$(compose ps -q nats-2)" "$(compose ps -q nats-3)" >/dev/null
probe_result killall

check operator wait "$job" --timeout 10m
say "job ended"
lib_audit "$job" "$items" 120s
if [ -n "$probe_failed" ]; then
  echo "compose-faults: more than 2 status probes failed, or counts went back, during:$probe_failed" >&2
  exit 1
fi
status=0
