#!/usr/bin/env bash
# Fault injection (examples/faults), three runs, each printing a table and
# exiting non-zero on any violation:
#  1. a 3-member etcd cluster on loopback: SIGSTOP and kill -9 of the etcd
#     leader, a follower and the lock holder;
#  2. as root, the same cluster and the workers each in a network namespace
#     (tests/support/net.rs): a holder or a waiter cut off, the leader
#     isolated with a holder and a waiter, 30% packet loss, delay spikes,
#     a flapping link. Without root it says why and is skipped;
#  3. a soak: lock cycles on many keys in both modes, failing if RSS,
#     etcd watches, keys or leases grow.
# Checkers: lost updates, overlapping critical sections, fair order,
# recovery time, leftovers (see examples/faults/main.rs).
#
#   scripts/faults.sh          # short runs (about 2 + 3 + 2 minutes)
#   scripts/faults.sh --long   # 5 injections per fault (about 8 + 12
#                              # minutes) and a 30-minute soak
#   scripts/faults.sh --redis  # instead: the Redis fault runs, one per
#                              # deployment (one redis-server, master +
#                              # replica + 3 sentinels, a 3+3 cluster),
#                              # one injection per fault, both modes
#                              # (about 3 minutes; --long: 5 each,
#                              # about 15 minutes); then, as root, the
#                              # sentinel master cut off from the
#                              # sentinels and its replica but not from
#                              # its clients, in network namespaces
#                              # (--redis sentinel --net, fair mode in
#                              # the short form, about 1 minute;
#                              # FAIRLOCK_NET_FAULTS=0 skips it)
#   scripts/faults.sh --workload shared|election
#                              # run 1 only, on read/write locks and
#                              # permits, or on an election (about 3
#                              # minutes; the network suite and the soak
#                              # run the mutex)
#   scripts/faults.sh --redis --workload shared|election
#                              # the Redis fault runs on those workloads
#                              # (the same checkers as etcd's, on the
#                              # resource's record of the writes; about
#                              # 3-5 minutes; the Redis part of the
#                              # network suite runs the mutex only)
#
# Other arguments go to the fault runs (see the example's --help).
# FAIRLOCK_NET_FAULTS=0 skips run 2, FAIRLOCK_SOAK=0 run 3. The clusters
# are their own; FAIRLOCK_ENDPOINTS is not used.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ensure_prereqs

long=0
workload=mutex
redis=0
prev=
args=()
for arg in "$@"; do
  [[ "$arg" == --long ]] && long=1
  [[ "$prev" == --workload ]] && workload=$arg
  if [[ "$arg" == --redis ]]; then redis=1; else args+=("$arg"); fi
  prev=$arg
done

if ((redis)); then
  # The Redis deployments' faults: restarts, failovers, kills and pauses of
  # the servers (examples/faults/redis_fault.rs). The sentinel run spends
  # most of its time waiting for the sentinels to make the old master a
  # replica (about 20 s per fault), so it runs beside the other two; each
  # run's output is printed whole once it ends.
  cargo build --quiet --example faults
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  run_redis() {
    cargo run --quiet --example faults -- --redis "$1" ${args[@]+"${args[@]}"} >"$out/$1" 2>&1
  }
  run_redis sentinel & sentinel=$!
  status=0
  for deployment in single cluster; do
    run_redis "$deployment" || status=1
    log "Redis fault run: $deployment"
    cat "$out/$deployment"
  done
  wait "$sentinel" || status=1
  log "Redis fault run: sentinel"
  cat "$out/sentinel"
  if [[ "${FAIRLOCK_NET_FAULTS:-1}" != 0 ]]; then
    # Alone: its failover timing is the sentinels', on a quiet machine.
    # The short form cuts a fair holder only (about 1 minute a mode).
    cut=(${args[@]+"${args[@]}"})
    if ((!long)) && [[ " ${args[*]-} " != *" --mode "* ]]; then cut+=(--mode fair); fi
    log "Redis fault run: sentinel master cut off (network namespaces)"
    cargo run --quiet --example faults -- --redis sentinel --net "${cut[@]}" || status=1
  fi
  exit "$status"
fi

# A debug build: `cargo test` has built it already, and the run's timing
# comes from the faults, not from the code's speed.
status=0
log "fault suite on loopback ($workload workload)"
cargo run --quiet --example faults -- "$@" || status=1
[[ "$workload" == mutex ]] || exit "$status"

if [[ "${FAIRLOCK_NET_FAULTS:-1}" != 0 ]]; then
  log "fault suite on a network of namespaces"
  cargo run --quiet --example faults -- --net "$@" || status=1
fi

if [[ "${FAIRLOCK_SOAK:-1}" != 0 ]]; then
  log "soak"
  if ((long)); then soak=1800; else soak=100; fi
  cargo run --quiet --example faults -- --soak "$soak" || status=1
fi
exit "$status"
