#!/usr/bin/env bash
# Agents at another site, behind a leaf node, on the secured docker-compose
# cluster (profile edge; docs/deploy.md, "Agents at other sites"):
#
#   1. build the images; auth init with --leaf site-b --js-domain hub;
#      compose up: the 3-node hub (JetStream domain hub), two coordinators,
#      3 agents of pool default at the hub, and site b: its leaf server
#      (on the wan and site-b networks) and 3 agents of pool site-b on the
#      site-b network only, with --js-domain hub
#   2. check that site b's network reaches no hub port (client, leaf,
#      cluster, monitoring): its agents reach the hub through the leaf only
#   3. submit a 3,000-item job for pool site-b (a 1 s busybox step, then
#      the flaky handler)
#   4. at 20 % done, cut the leaf's link for 60 s (docker network
#      disconnect of the leaf from wan), then restore it; meanwhile
#      `composecheck probe` asks for the job's status every 0.5 s from the
#      hub side (at most 2 failures, the count never goes back), status
#      must name site b's agents as unreachable, and the agents log a few
#      lines about it, not one per try
#   5. wait for the end; exact counts against the results, DLQ and work
#      streams (each item succeeded or dead-lettered exactly once), every
#      result from a site-b agent; print the duplicates the cut cost (runs
#      reported beyond one per item)
#
# Usage: scripts/compose-edge.sh [--keep]   (--keep leaves the cluster up)
# Env:   EDGE_ITEMS (default 3000), EDGE_CUT (seconds, default 60)
lib_name=edge
lib_auth_args="--pools default --leaf site-b --js-domain hub"
lib_up_args="--scale agent-site-b=3"
source "$(dirname "$0")/compose-lib.sh"
lib_report="$work/report.txt"
: >"$lib_report"
items=${EDGE_ITEMS:-3000}
cut=${EDGE_CUT:-60}
export COMPOSE_PROFILES=edge
export FLEET_POOLS=default,site-b

lib_build
job="edge-$(date +%s)"
lib_job "$job" "$items" 1
sed -i 's/^pool: default$/pool: site-b/' "$work/job.yaml"
lib_up
nets=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' "$(compose ps -q leaf-site-b)" | tr ' ' '\n')
wan=$(echo "$nets" | grep '_wan$')
site=$(echo "$nets" | grep '_site-b$')
leaf=$(compose ps -q leaf-site-b)

say "site b's network reaches no port of the hub: its agents go through the leaf"
tool_net=$site check operator unreachable tcp://nats-1:4222 tcp://nats-2:4222 tcp://nats-3:4222 \
  tcp://nats-1:7422 tcp://nats-1-wan:7422 tcp://nats-1:6222 tcp://nats-1:8222 >/dev/null

say "submitting $job ($items items, pool site-b) as the submitter"
fleetctl submitter submit /work/job.yaml >/dev/null
check operator wait "$job" --done $((items * 20 / 100)) --timeout 10m
done_at_cut=$(fleetctl operator status "$job" --json | grep -o '"succeeded": *[0-9]*' | grep -o '[0-9]*$' || true)

say "cutting the leaf's link for ${cut}s (docker network disconnect $wan leaf-site-b)"
check operator probe "$job" --label cut --for "$((cut + 20))s" >>"$lib_report" 2>"$work/probe-cut.err" &
probe_pid=$!
since=$(date -u +%Y-%m-%dT%H:%M:%SZ)
docker network disconnect "$wan" "$leaf"
cut_t0=$(date +%s)
# Status names the site's agents as unreachable once the hub has not heard
# from them for 3 presence intervals (15 s).
unreachable=""
for _ in $(seq 45); do
  fleetctl operator status "$job" --json >"$work/status-cut.json" 2>/dev/null || true
  unreachable=$(grep -o '"unreachable_agents"' "$work/status-cut.json" || true)
  [ -n "$unreachable" ] && break
  sleep 1
done
if [ -z "$unreachable" ]; then
  echo "compose-edge: status named no unreachable agent during the cut" >&2
  cat "$work/status-cut.json" >&2
  exit 1
fi
echo "cut: status names $(grep -o '"name": *"[^"]*"' "$work/status-cut.json" | wc -l) unreachable agent(s) $(( $(date +%s) - cut_t0 ))s into the cut" >>"$lib_report"
tr -d ' \n' <"$work/status-cut.json" | grep -o '"unreachable_agents":\[[^]]*\]' >>"$lib_report" || true
sleep $(( cut - ($(date +%s) - cut_t0) ))
docker network connect "$wan" "$leaf"
say "link restored after $(( $(date +%s) - cut_t0 ))s"
wait "$probe_pid" || { cat "$work/probe-cut.err" >&2; echo "compose-edge: status probes failed during the cut" >&2; exit 1; }
tail -1 "$lib_report"

check operator wait "$job" --timeout 15m
say "job ended"
# What site b's agents logged while the link was down: a line for the cut,
# one when the hub answers again; never one per try.
: >"$work/agents-b.log"
for id in $(compose ps -q agent-site-b); do docker logs --since "$since" "$id" >>"$work/agents-b.log" 2>&1; done
lines=$(wc -l <"$work/agents-b.log")
warns=$(grep -c '"level":"warn"' "$work/agents-b.log" || true)
again=$(grep -c 'answers again' "$work/agents-b.log" || true)
echo "cut: site b's 3 agents logged $lines line(s) since the cut, $warns of them warnings; $again said the hub answers again:" >>"$lib_report"
grep -o '"level":"[a-z]*".*"message":"[^"]*"' "$work/agents-b.log" | sed -E 's/"(component|pool|agent)":"[^"]*",//g' | cut -c1-220 | sed 's/^/    /' >>"$lib_report" || true
if [ "$again" -lt 3 ]; then
  tail -20 "$work/agents-b.log" >&2
  echo "compose-edge: not every site b agent said the hub answers again" >&2
  exit 1
fi
if [ "$warns" -gt 12 ]; then
  grep '"level":"warn"' "$work/agents-b.log" | head -20 >&2
  echo "compose-edge: site b's agents logged $warns warnings during a ${cut}s cut (want a few per agent, not one per try)" >&2
  exit 1
fi

lib_audit "$job" "$items" 120s
check coordinator verify "$job" --items "$items" --status /work/status.json --origin site-b | tee -a "$lib_report"
echo "cut at $done_at_cut succeeded items of $items; AckWait ${FLEET_ACK_WAIT}: the items running or buffered at the cut ran again (results read beyond one per item, above)" >>"$lib_report"
status=0
