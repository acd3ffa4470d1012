#!/usr/bin/env bash
# Every check: formatting, lints, docs, the tests on every server version
# fairlock supports, the fault suite. Extra args go to each cargo test.
# The integration tests start their own etcd and redis-server processes
# (etcd from ETCD_BIN, redis-server from REDIS_BIN, else from PATH), so
# none is started here. Each step prints how long it took, and the run
# ends with a table of them.
#
#   scripts/test.sh                 # everything
#   scripts/test.sh -- --nocapture  # pass args through to cargo test
#
# The rounds, newest server first:
#   1. every test on etcd 3.5.30 (Debian forky's, the newest etcd Debian
#      has: etcd's March 2026 auth changes), and the fault suite on it
#      (the mutex, then short runs of the shared and election workloads),
#      then the fault suite's Redis runs (one server, sentinels, cluster);
#   2. the etcd tests on etcd 3.7 as emulated in front of 3.5.30 (see
#      tests/support/emulate.rs: 3.7 answers keys-only reads without
#      leases), and the fault suite's loopback run there;
#   3. the etcd tests on etcd 3.5.16 (Debian trixie's) and 3.4.23 (Debian
#      bookworm's, the `etcd` on PATH);
#   4. the Redis tests on Valkey 8 (Debian bookworm-backports); the first
#      round ran them on Redis 7. The test runs of rounds 2 to 4 run side
#      by side, after the fault suite's run of round 2, without the
#      burst checks, which round 1 runs alone.
# FAIRLOCK_ETCD_VERSIONS=0 runs round 1 on the etcd on PATH and skips 2
# and 3; FAIRLOCK_FAULTS=0 skips the fault suite; FAIRLOCK_VALKEY=0 round 4.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ensure_prereqs

timings=()
current=
started=$SECONDS
began=$SECONDS
# Ends the step under way (printing its time) and starts the next one.
step() {
  if [[ -n "$current" ]]; then
    local took=$((SECONDS - started))
    printf -- '--- %s: %dm%02ds\n' "$current" $((took / 60)) $((took % 60))
    timings+=("$(printf '%4dm%02ds  %s' $((took / 60)) $((took % 60)) "$current")")
  fi
  current=$*
  started=$SECONDS
  [[ -z "$current" ]] || printf '\n=== %s ===\n' "$current"
}

# The last rounds only run tests that are built already, and those wait
# on their servers far more than they compute (about a third of one core
# each here), so they run side by side, each with servers of its own on
# free ports: together they take about as long as the longest. Each
# writes a log of its own, printed with its time once all are done.
# A run still going when this script stops early is stopped with it.
stop_side_by_side() {
  local pid
  for pid in "${side_by_side_pids[@]}"; do
    pkill -P "$pid" 2>/dev/null || true
  done
}
trap stop_side_by_side EXIT
side_by_side_names=()
side_by_side_pids=()
side_by_side_logs=()
side_by_side() {
  local name=$1 log
  shift
  log=$(mktemp)
  printf '=== %s (side by side) ===\n' "$name"
  (
    began_here=$SECONDS
    status=0
    "$@" || status=$?
    took=$((SECONDS - began_here))
    printf -- '--- %s: %dm%02ds\n' "$name" $((took / 60)) $((took % 60))
    exit "$status"
  ) >"$log" 2>&1 &
  side_by_side_names+=("$name")
  side_by_side_pids+=("$!")
  side_by_side_logs+=("$log")
}
# Waits for every run side_by_side started, as one step; prints each
# one's log, and fails if any failed.
side_by_side_wait() {
  ((${#side_by_side_pids[@]})) || return 0
  step "side by side: $(IFS=';'; echo "${side_by_side_names[*]}")"
  local i failed=()
  for i in "${!side_by_side_pids[@]}"; do
    wait "${side_by_side_pids[$i]}" || failed+=("${side_by_side_names[$i]}")
  done
  for i in "${!side_by_side_pids[@]}"; do
    printf '\n=== %s ===\n' "${side_by_side_names[$i]}"
    cat "${side_by_side_logs[$i]}"
    rm -f "${side_by_side_logs[$i]}"
  done
  if ((${#failed[@]})); then
    printf '\nFAILED: %s\n' "${failed[@]}" >&2
    exit 1
  fi
}

# The test files that start etcd: all but the Redis ones and those that
# run in-process (a new etcd test file joins the version rounds by itself).
etcd_tests=()
for file in tests/*.rs; do
  name=$(basename "$file" .rs)
  case "$name" in
    *redis* | redlock | memory | memory_* | bounds | module_graph) ;;
    *) etcd_tests+=(--test "$name") ;;
  esac
done

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy, all features"
cargo clippy --all-targets --all-features -- -D warnings

# Each feature set a library user can choose compiles without warnings on
# its own, every target of it (tests, examples, the command) included: a
# cfg mistake (code only one backend calls, a type only one backend names,
# a test file without its required-features) hides in the all-features
# build. The tests run once, in the all-features rounds below.
for set in "--no-default-features" "--no-default-features --features etcd" \
  "--no-default-features --features redis" ""; do
  read -ra flags <<<"$set"
  step "cargo clippy, features: ${set:-default}"
  cargo clippy "${flags[@]}" --all-targets -- -D warnings
done

step "cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features

newest=etcd
if [[ "${FAIRLOCK_ETCD_VERSIONS:-1}" != 0 ]]; then
  newest=$(ensure_debian_etcd forky)
fi
etcd_version() { "$1" --version | sed -n 's/^etcd Version: //p'; }

step "cargo test, etcd $(etcd_version "$newest") and Redis 7"
ETCD_BIN=$newest cargo test --all-features "$@"

# The fault suite's short runs (one injection per fault, both modes; a
# violation prints both workers' events and the lock key's history): on
# loopback, then as root on a network of namespaces, then a short soak.
# scripts/faults.sh --long is the long run.
if [[ "${FAIRLOCK_FAULTS:-1}" != 0 ]]; then
  step "fault suite, etcd $(etcd_version "$newest"): loopback, network, soak (about 7 minutes)"
  ETCD_BIN=$newest scripts/faults.sh
  # The read/write lock, semaphore and election workloads, short: fair
  # mode, the holder faults only (paused past the TTL, killed, lease
  # revoked), each checked for exclusion, the permit limit, tokens that
  # never go back, refused fenced writes and converging observers.
  step "fault suite, etcd $(etcd_version "$newest"): shared and election workloads, holder faults (about 1 minute)"
  for workload in shared election; do
    ETCD_BIN=$newest scripts/faults.sh --workload "$workload" --mode fair --only holder
  done
  # Redis 7 (Debian's redis-server): one server restarted with and
  # without persistence, a master behind sentinels failed over, killed
  # and paused, a cluster's master failed over, killed and paused and its
  # slot migrated, under a holder; no overlap, no token going back.
  step "fault suite, Redis: one server, sentinels, cluster, a cut-off master (about 4 minutes)"
  scripts/faults.sh --redis
fi

# The burst checks (1,000 lock calls at once on every backend, 10,000 on
# Redis) load the machine by design: they run in round 1, alone. The
# side-by-side rounds, four test binaries on this machine's two cores,
# skip them: there they failed for want of CPU (a lease or a queue
# record not renewed in time), not for a defect the round would find.
side_args=("$@")
if [[ " $* " != *" -- "* ]]; then
  side_args+=(--)
fi
side_args+=(--skip a_burst_of_waiters_is_served --skip ten_thousand_waiters_at_once_are_served)

if [[ "${FAIRLOCK_ETCD_VERSIONS:-1}" != 0 ]]; then
  if [[ "${FAIRLOCK_FAULTS:-1}" != 0 ]]; then
    step "fault suite, etcd 3.7 emulated: loopback (about 2 minutes)"
    FAIRLOCK_ETCD_EMULATE=3.7 ETCD_BIN=$newest FAIRLOCK_NET_FAULTS=0 FAIRLOCK_SOAK=0 \
      scripts/faults.sh
  fi
  side_by_side "etcd tests, etcd 3.7 emulated in front of $(etcd_version "$newest")" \
    env FAIRLOCK_ETCD_EMULATE=3.7 ETCD_BIN="$newest" cargo test --all-features "${etcd_tests[@]}" "${side_args[@]}"
  for etcd in "$(ensure_debian_etcd trixie)" "$(command -v etcd)"; do
    side_by_side "etcd tests, etcd $(etcd_version "$etcd")" \
      env ETCD_BIN="$etcd" cargo test --all-features "${etcd_tests[@]}" "${side_args[@]}"
  done
fi

# Valkey 8 (Debian bookworm-backports, installed by ensure_valkey in
# scripts/lib.sh): the Redis test files again, every deployment (one
# instance, Redlock, cluster, sentinel, TLS, the command) on valkey-server.
if [[ "${FAIRLOCK_VALKEY:-1}" != 0 ]]; then
  valkey=$(ensure_valkey)
  side_by_side "Redis tests, Valkey $("$valkey" --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')" \
    env REDIS_BIN="$valkey" cargo test --all-features --test redis --test redlock --test redis_connect \
    --test redis_foreign --test redis_hostile --test redis_cluster --test redis_sentinel --test redis_election \
    --test tls_redis --test cli_redis "${side_args[@]}"
fi
side_by_side_wait

step ""
total=$((SECONDS - began))
printf '\n=== all checks passed in %dm%02ds ===\n' $((total / 60)) $((total % 60))
printf '%s\n' "${timings[@]}"
