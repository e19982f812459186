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
#   4. right after the kill of every node, the disk faults. Each node's
#      store is small (max_file_store 640MB, nats-3's 512MB, in a copy of
#      deploy/nats), and before the job `composecheck fill` stored 420 MiB
#      of 1 MiB chunks in the uploads object store (R3, as a submitter may):
#        disk-node 120 MiB more: nats-3's store is full, the others' is
#                  not; the job must keep moving (150 more items done)
#        disk-all  chunks until every one is refused for want of room: the
#                  whole cluster's store is full. A submission must be
#                  refused with store_full, status must say store full,
#                  the done count must not go back. After 20 s the
#                  operator's fix: max_file_store raised to 8GB in the
#                  copies and the nodes told to reload (SIGHUP), what fill
#                  stored purged; the job must move again
#   5. wait for the end; check exact counts against the results, DLQ and
#      work streams (no item lost, none counted twice) and that every node
#      holds the same copy of every stream
#   6. print a line per fault (probes, failures, time to resume) and the
#      coordinator takeover times; docker compose down -v on every exit path
#
# Usage: scripts/compose-faults.sh [--keep]   (--keep leaves the cluster up)
# Env:   FAULTS_ITEMS (default 3000); FAULTS_ONLY=disk runs the disk faults
#        alone (at 60 % done, with no fault before them)
lib_name=faults
source "$(dirname "$0")/compose-lib.sh"
lib_report="$work/report.txt" # printed by cleanup after the result
items=${FAULTS_ITEMS:-3000}
only=${FAULTS_ONLY:-}

lib_build
# Each node's store limit in a copy of deploy/nats (the disk faults): the
# jetstream block moves from cluster.conf into each node's file, with its
# own max_file_store, which set_store_limit raises later (a reload may
# raise max_file_store, never lower it).
conf="$work/nats"
cp -r deploy/nats "$conf"
js_block=$(awk '/^jetstream \{/,/^\}/' deploy/nats/cluster.conf)
awk '/^jetstream \{/,/^\}/ {next} {print}' deploy/nats/cluster.conf >"$conf/cluster.conf"
for n in 1 2 3; do
  limit=640MB; [ "$n" = 3 ] && limit=512MB
  printf '\n# compose-faults.sh: this node'"'"'s own store limit (the disk faults)\n%s\n' \
    "$(echo "$js_block" | sed "s/max_file_store: .*/max_file_store: $limit/")" >>"$conf/nats-$n.conf"
done
chmod -R a+rX "$conf"
export FLEET_NATS_CONF="$conf"
# set_store_limit LIMIT NODE...: the nodes' max_file_store raised to LIMIT, by a reload.
set_store_limit() {
  local limit=$1 n; shift
  for n in "$@"; do
    sed -i "s/max_file_store: .*/max_file_store: $limit/" "$conf/$n.conf"
    docker kill -s HUP "$(compose ps -q "$n")" >/dev/null
  done
}
job="faults-$(date +%s)"
lib_job "$job" "$items" 2
lib_up
say "the disk faults' ground: 420 MiB in the uploads object store (nats-3's store is 512MB, the others' 640MB)"
prefill=$(check submitter fill --mib 420 --timeout 3m)
say "  $prefill"
say "ready; submitting $job ($items items) as the submitter"
fleetctl submitter submit /work/job.yaml >/dev/null
report=$lib_report
: >"$report"

# probe_during LABEL SECONDS [PROBE FLAGS]: status probes in the background for SECONDS.
# A probe run fails when the done count goes back (status must never go
# back, docs/design.md), and, with --max-gap, when status goes unanswered
# longer than that: 25 s, the 20 s fault and 5 s to answer again. How many
# single 3 s probes fail meanwhile is reported, not bounded: it measures
# how fast a coordinator takes over on this machine (5 s at a load average
# of 1-3, 18 s at 30), which other work on the machine decides.
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

if [ "$only" != disk ]; then
check operator wait "$job" --done $((items * 5 / 100)) --timeout 5m
coord=$(leading_coordinator)
say "fault 1 (pause): docker pause $coord, the leading coordinator, for 12 s"
probe_during pause 30 --max-gap 25s
docker pause "$(compose ps -q "$coord")" >/dev/null
echo "pause: lease taken over after $(takeover "$coord")" >>"$report"
sleep 8 # the pause lasts 12 s or more, the takeover's wait included
docker unpause "$(compose ps -q "$coord")" >/dev/null
probe_result pause

check operator wait "$job" --done $((items * 15 / 100)) --timeout 5m
meta=$(monitor leader $monitoring)
node=nats-1; [ "$meta" = nats-1 ] && node=nats-2
say "fault 2 (node): $node (not the meta leader, $meta) cut off the cluster network for 20 s"
probe_during node 35 --max-gap 25s
disconnect_for "$node" "$clusternet" "$node-cluster" 20
probe_result node

check operator wait "$job" --done $((items * 30 / 100)) --timeout 5m
meta=$(monitor leader $monitoring)
say "fault 3 (meta): the meta leader, $meta, cut off the cluster network for 20 s"
probe_during meta 35 --max-gap 25s
disconnect_for "$meta" "$clusternet" "$meta-cluster" 20
probe_result meta

check operator wait "$job" --done $((items * 45 / 100)) --timeout 5m
coord=$(leading_coordinator)
say "fault 4 (clients): the leading coordinator, $coord, cut off the clients' network for 20 s"
probe_during clients 35 --max-gap 25s
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
else
  check operator wait "$job" --done $((items * 60 / 100)) --timeout 10m
  say "FAULTS_ONLY=disk: faults 1-5 left out"
fi

say "fault 6 (disk-node): nats-3's store filled (512MB), the others' not (640MB)"
probe_during disk-node 40 --max-gap 25s
fill=$(check submitter fill --mib 120 --timeout 3m)
echo "disk-node: $fill" >>"$report"
say "  $fill; the job must move on while nats-3 is full"
check operator wait "$job" --more 150 --timeout 3m
say "  150 more items done with nats-3's store full"
probe_result disk-node

say "fault 7 (disk-all): every node's store filled"
# Store-full answers are what status should give meanwhile: the probe
# counts them as failures, and no answer comes while the store is full, so
# only going back fails it here.
check operator probe "$job" --label disk-all --for 80s >>"$report" 2>"$work/probe-disk-all.err" &
probe_pid=$!
fill=$(check submitter fill --until-full --full-for 5s --timeout 3m)
echo "disk-all: $fill" >>"$report"
say "  $fill"
printf 'id: refused-%s\npool: default\nagent_template:\n  - name: work\n    shell: "true"\nitems:\n  - {id: a}\n' "$job" >"$work/refused.yaml"
# Never accepted, and refused with store_full: also once the intake
# stream's leader has stepped down (a coordinator whose own write was
# refused for want of room says so while its writes go unanswered).
if fleetctl submitter submit /work/refused.yaml --timeout 20s >"$work/refused.out" 2>&1; then
  echo "compose-faults: a submission was accepted while the store was full" >&2; cat "$work/refused.out" >&2; exit 1
fi
if ! grep -q 'store full' "$work/refused.out"; then
  echo "compose-faults: the submission was refused, but not with store_full:" >&2; cat "$work/refused.out" >&2; exit 1
fi
echo "disk-all: submission refused: $(tail -1 "$work/refused.out")" >>"$report"
fleetctl operator status "$job" --timeout 10s >"$work/full-status.out" 2>&1 || true
echo "disk-all: status: $(tail -1 "$work/full-status.out")" >>"$report"
say "  $(tail -1 "$work/refused.out"); 20 s with the store full"
sleep 20
say "  room again: max_file_store raised to 8GB on every node (reload), what fill stored purged"
freed=$(date +%s)
set_store_limit 8GB nats-1 nats-2 nats-3
uploads=OBJ_fleet_uploads # messages.Names{}.UploadsBucket(), the compose default prefix
if ! check coordinator free --timeout 2m >"$work/free.out" 2>"$work/free.err"; then
  cat "$work/free.err" >&2
  echo "== the uploads stream's group as each node sees it:" >&2
  monitor group "$uploads" $monitoring >&2 || true
  exit 1
fi
echo "disk-all: $(cat "$work/free.out"), $(wc -l <"$work/free.err") failed attempts before" >>"$report"
sed 's/^/    /' "$work/free.err" >>"$report"
check operator wait "$job" --more 100 --timeout 5m
echo "disk-all: 100 more items done $(( $(date +%s) - freed ))s after the limits were raised" >>"$report"
if ! wait "$probe_pid"; then probe_failed+=" disk-all"; fi
tail -1 "$report"
echo "    disk-all: $(grep -c 'probe failed' "$work/probe-disk-all.err" || true) probes failed, of which $(grep -c 'store' "$work/probe-disk-all.err" || true) said the store was full" | tee -a "$report"
grep 'went back' "$work/probe-disk-all.err" | sed 's/^/    /' | tee -a "$report" >&2 || true

check operator wait "$job" --timeout 10m
say "job ended"
lib_audit "$job" "$items" 120s
if [ -n "$probe_failed" ]; then
  echo "compose-faults: status went back, or went unanswered past its bound, during:$probe_failed" >&2
  exit 1
fi
status=0
