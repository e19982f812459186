#!/usr/bin/env bash
# A rolling upgrade of the secured docker-compose cluster, from the
# previous release to this tree, with a job running throughout
# (docs/deploy.md, "Upgrades"):
#
#   1. build the previous release's images (the last release with a
#      commit in docs/releases.txt) from the repository's own history: a
#      `git worktree` at its commit, its own scripts/images.sh (static
#      binaries, FROM scratch), tagged VERSION-COMMIT12 and kept for the
#      next run; then this tree's images, as scripts/compose-e2e.sh does
#   2. the role keys of the previous release (its fleetctl's auth init:
#      the keys the fleet being upgraded has; re-issued after the roll,
#      docs/deploy.md); compose up (3 NATS nodes R3, two coordinators,
#      3 agents), every process of the previous release; submit a job with the previous
#      release's fleetctl (a busybox step, then the flaky handler: retries
#      and dead letters cross the releases)
#   3. once 3 % of it is done, `composecheck probe` asks for the job's
#      status every 0.5 s, each probe given 3 s, until the job ends: not
#      one may go unanswered, and the done count may never go back
#   4. the roll, in the order docs/deploy.md gives, each step waited for
#      before the next, all under the previous release's role keys:
#        coordinators  one at a time: recreated with this tree's image;
#                      until `fleetctl version` lists it (a leader's
#                      successor takes over within the lease TTL)
#        agents        one at a time: docker stop (SIGTERM: running items
#                      finish, the rest are naked at once), then one of
#                      this tree's; until `fleetctl version` lists it
#        NATS nodes    one at a time: lame-duck mode (SIGUSR2: it hands
#                      its Raft leaderships over and moves its clients),
#                      then recreated with this tree's image on the same
#                      volume; until its /healthz says ok (caught up)
#      the job must still be running when the last node is back
#   5. wait for the end; exact counts against the results, DLQ and work
#      streams (no item lost, none counted twice, one DLQ entry per
#      dead-lettered item) and every node holding the same copy of every
#      stream; a report of each step's times and the probes
#
# Usage: scripts/compose-upgrade.sh [--keep]   (--keep leaves the cluster up)
# Env:   UPGRADE_ITEMS (default 4000), UPGRADE_STEP_SECONDS (the busybox
#        step's sleep, default 3), UPGRADE_REBUILD=1 (build the previous
#        release's images even if they exist), JETFLEET_TAG (this tree's
#        images, default upgrade)
# Run it under the shared lock: flock /work/wt/compose.lock bash scripts/compose-upgrade.sh
lib_name=upgrade
# This tree's images under their own tag, apart from the other compose
# runs' "dev".
export JETFLEET_TAG=${JETFLEET_TAG:-upgrade}
source "$(dirname "$0")/compose-lib.sh"
lib_report="$work/report.txt" # printed by cleanup after the result
report=$lib_report
: >"$report"
items=${UPGRADE_ITEMS:-4000}
step_secs=${UPGRADE_STEP_SECONDS:-3}
new_tag=$JETFLEET_TAG

# The previous release: the last line of docs/releases.txt with a commit.
read -r old_version old_commit < <(awk '!/^#/ && NF >= 2 && $2 != "-" { v = $1; c = $2 } END { print v, c }' docs/releases.txt)
if [ -z "${old_commit:-}" ]; then
  echo "compose-upgrade: docs/releases.txt names no release with a commit" >&2
  exit 1
fi
old_tag="$old_version-${old_commit:0:12}"

# The worktree of the previous release, removed on every exit path
# (compose-lib's cleanup runs after, with the exit status).
old_tree=""
# So is the status probe's container, which would outlive a failed run.
probe_name="$project-probe"
trap 'rc=$?
  set +e # a failing command here must not skip cleanup
  docker rm -f "$probe_name" >/dev/null 2>&1 || true
  if [ -n "$old_tree" ]; then git worktree remove --force "$old_tree" >/dev/null 2>&1 || true; fi
  (exit $rc); cleanup' EXIT

build_previous() {
  if [ "${UPGRADE_REBUILD:-0}" != 1 ] &&
    docker image inspect "jetfleet/nats-server:$old_tag" "jetfleet/coordinator:$old_tag" \
      "jetfleet/agent:$old_tag" "jetfleet/fleetctl:$old_tag" >/dev/null 2>&1; then
    say "the previous release's images (tag $old_tag) are built already"
    return
  fi
  if ! git cat-file -e "$old_commit^{commit}" 2>/dev/null; then
    echo "compose-upgrade: the history lacks $old_version's commit $old_commit (a shallow clone?)" >&2
    exit 1
  fi
  say "building $old_version's images from a git worktree at ${old_commit:0:12} (tag $old_tag)"
  old_tree="$work/previous"
  git worktree add --detach --quiet "$old_tree" "$old_commit"
  JETFLEET_DIST="$work/previous-dist" bash "$old_tree/scripts/images.sh" --tag "$old_tag"
  git worktree remove --force "$old_tree"
  old_tree=""
}

# versions: `fleetctl version --json` of the fleet (this tree's fleetctl).
versions() { fleetctl operator version --json --wait 2s 2>/dev/null; }
# wait_versions WHAT NEW TOTAL: until fleetctl version lists TOTAL agents
# (or coordinators) of which NEW name a build (the previous release's name
# none). Prints how long it took.
wait_versions() {
  local what=$1 want_new=$2 want_total=$3 t=$(date +%s) got=""
  local q='([.agents[] | select((.version // "") != "")] | length), (.agents | length)'
  [ "$what" = coordinators ] && q='([.coordinators[] | select((.build // "") != "")] | length), (.coordinators | length)'
  for _ in $(seq 60); do
    got=$(versions | jq -r "$q" | paste -sd' ' || true)
    if [ "$got" = "$want_new $want_total" ]; then
      echo "$(( $(date +%s) - t ))s"
      return 0
    fi
    sleep 1
  done
  echo "compose-upgrade: fleetctl version lists $what (new, total) $got, want $want_new $want_total" >&2
  exit 1
}
# progress: the job's done count and state.
progress() {
  fleetctl operator status "$job" --json 2>/dev/null |
    jq -r '"\(.succeeded + .dead_lettered)/\(.items) done (\(.state))"' 2>/dev/null || echo "status unavailable"
}
step() { # LINE: a line of the report, with the time and the job's progress
  local line
  line="[$(elapsed)] $1; job $(progress)"
  echo "$line" >>"$report"
  say "$line"
}

build_previous
export JETFLEET_COMMIT # stamped into this tree's binaries: fleetctl version tells them apart
JETFLEET_COMMIT=$(git rev-parse HEAD)
lib_build
# The fleet being upgraded has the role keys of the previous release: its
# own fleetctl's `auth init` (taken out of its image), same flags. This
# tree's keys refuse v0.3.0's agents the job records; they are re-issued
# only after the roll (docs/deploy.md, "Upgrades"). The servers' config of
# this tree includes leaf-tls.conf, which the previous release does not
# write (server TLS only, no permission in it): this tree's, beside.
mv "$FLEET_AUTH_DIR" "$work/auth-next"
mkdir -p "$FLEET_AUTH_DIR"
old_ctl=$(docker create "jetfleet/fleetctl:$old_tag")
docker cp "$old_ctl:/fleetctl" "$work/fleetctl-$old_version" >/dev/null
docker rm "$old_ctl" >/dev/null
# shellcheck disable=SC2086 # lib_auth_args is a list of flags
"$work/fleetctl-$old_version" auth init "$FLEET_AUTH_DIR" --tls --server-dir /etc/nats/auth --force ${lib_auth_args:-} >/dev/null
cp "$work/auth-next/leaf-tls.conf" "$FLEET_AUTH_DIR/"
chmod -R a+rX "$FLEET_AUTH_DIR"
if grep -q 'fleet_specs_\|dlqin' "$FLEET_AUTH_DIR/auth.conf"; then
  echo "compose-upgrade: $old_version's auth init wrote this tree's permissions" >&2
  exit 1
fi
say "role keys of $old_version (its fleetctl auth init): agents read fleet_jobs, no specs bucket, no per-pool DLQ"
job="upgrade-$(date +%s)"
lib_job "$job" "$items" "$step_secs"
say "every process of $old_version ($old_tag) first"
JETFLEET_TAG=$old_tag lib_up
echo "before: $(versions | jq -c '{coordinators: [.coordinators[] | .build // .version], agents: [.agents[] | .version // ""]}')" >>"$report"

say "submitting $job ($items items) with $old_version's fleetctl"
JETFLEET_TAG=$old_tag fleetctl submitter submit /work/job.yaml >/dev/null
check operator wait "$job" --done $((items * 3 / 100)) --timeout 5m
say "status probes until the job ends (every 0.5 s, 3 s each, none may fail)"
tool operator --entrypoint /composecheck --name "$probe_name" -- probe "$job" --label upgrade --for 60m --timeout 3s --max-failures 0 >>"$report" 2>"$work/probe.err" &
probe_pid=$!
step "start of the roll, $old_version everywhere"

# 1. Coordinators first, one at a time (CHANGELOG.md: the agents of this
# release read the specs its coordinators write).
n=0
for c in coordinator-1 coordinator-2; do
  n=$((n + 1))
  leader=$(check coordinator holder | cut -d- -f1-2)
  t=$(date +%s)
  JETFLEET_TAG=$new_tag compose up -d --no-deps --force-recreate "$c" >>"$work/up.log" 2>&1
  replaced=$(( $(date +%s) - t ))
  listed=$(wait_versions coordinators "$n" 2)
  step "coordinator $n/2: $c (the leader was $leader) recreated in ${replaced}s, listed with this tree's build after $listed; leader now $(check coordinator holder | cut -d- -f1-2)"
done

# 2. Agents, one at a time.
n=0
for id in $(compose ps -q agent); do
  n=$((n + 1))
  name=$(docker inspect -f '{{.Name}}' "$id" | tr -d /)
  t=$(date +%s)
  docker stop -t 45 "$id" >/dev/null # past the agent's 30 s --shutdown-timeout
  docker rm "$id" >/dev/null
  stopped=$(( $(date +%s) - t ))
  JETFLEET_TAG=$new_tag compose up -d --no-deps --no-recreate --scale agent=3 agent >>"$work/up.log" 2>&1
  listed=$(wait_versions agents "$n" 3)
  step "agent $n/3: $name stopped in ${stopped}s, its successor listed with this tree's build after $listed"
done

# 3. NATS nodes, one at a time: lame duck, then this tree's image.
for node in nats-1 nats-2 nats-3; do
  meta=$(monitor leader $monitoring)
  id=$(compose ps -q "$node")
  t=$(date +%s)
  docker update --restart=no "$id" >/dev/null # lame duck ends in an exit: no restart of the old image
  docker kill -s USR2 "$id" >/dev/null
  if ! timeout 90 docker wait "$id" >/dev/null; then
    echo "compose-upgrade: $node still runs 90 s after lame-duck mode: stopping it" >&2
    docker stop -t 5 "$id" >/dev/null
  fi
  ldm=$(( $(date +%s) - t ))
  JETFLEET_TAG=$new_tag compose up -d --no-deps --force-recreate "$node" >>"$work/up.log" 2>&1
  healthy=$(monitor healthy --timeout 3m "http://$node-monitoring:8222")
  step "$node (meta leader was $meta): lame duck and exit in ${ldm}s, back with this tree's image, ${healthy#*: }"
done

echo "after: $(versions | jq -c '{coordinators: [.coordinators[] | .build // .version], agents: [.agents[] | .version // ""]}')" >>"$report"
state=$(fleetctl operator status "$job" --json 2>/dev/null | jq -r .state || true)
case $state in
  succeeded | failed | stopped | cancelled | rejected)
    echo "compose-upgrade: the job had ended ($state) before the roll did: it must run throughout (raise UPGRADE_ITEMS)" >&2
    exit 1 ;;
esac

check operator wait "$job" --timeout 20m
say "job ended"
probe_ok=true
wait "$probe_pid" || probe_ok=false
sed 's/^/    /' "$work/probe.err" | tee -a "$report" >&2
lib_audit "$job" "$items" 120s
if ! $probe_ok; then
  echo "compose-upgrade: a status probe went unanswered for 3 s, or the done count went back, during the upgrade" >&2
  exit 1
fi
status=0
