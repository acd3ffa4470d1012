#!/usr/bin/env bash
# A before/after pair of the benchmark: the bench built from BASE (a git
# revision) and from the working tree take turns against ONE etcd (and
# start their own Redis servers for --redis-cycle), so that both builds
# see the same server and machine state.
#
#   scripts/bench-pair.sh BASE [ROUNDS] [-- BENCH ARGS...]
#
# ROUNDS (default 2) runs of each build, alternating base/head. The bench
# args default to `--quick --no-go --no-redis --soak-secs 0`; each round
# also runs `--redis-cycle` (the uncontended Redis cycle, its floor and
# rslock, interleaved). Each run prints its own ratios to its floor and
# peers; compare those ratios between builds, not raw rates across rounds.
# The base build lives in a worktree under target/bench-pair/.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

base=${1:?usage: scripts/bench-pair.sh BASE [ROUNDS] [-- BENCH ARGS...]}
shift
rounds=2
if [[ $# -gt 0 && $1 != -- ]]; then
  rounds=$1
  shift
fi
[[ ${1:-} == -- ]] && shift
args=("$@")
[[ ${#args[@]} -eq 0 ]] && args=(--quick --no-go --no-redis --soak-secs 0)

rev=$(git rev-parse --short "$base^{commit}") || die "unknown revision $base"
dir=target/bench-pair/$rev
if [[ ! -d $dir/src ]]; then
  mkdir -p target/bench-pair
  git worktree add -f --detach "$dir" "$rev" >/dev/null
fi
log "building the bench at $rev and at the working tree"
(cd "$dir" && CARGO_TARGET_DIR="$PWD/../$rev-target" \
  cargo build --release --example bench --features etcd,redis -q)
cargo build --release --example bench --features etcd,redis -q
base_bin=target/bench-pair/$rev-target/release/examples/bench
head_bin=target/release/examples/bench

start_etcd
for ((i = 1; i <= rounds; i++)); do
  for side in base head; do
    bin=${side}_bin
    log "round $i: $side (${!bin})"
    "${!bin}" --endpoints "$FAIRLOCK_ENDPOINTS" "${args[@]}"
    "${!bin}" --redis-cycle
  done
done
