#!/usr/bin/env bash
# Full local check: formatting, lints, docs, tests (extra args go to cargo test).
# The integration tests start their own etcd and redis-server processes from
# PATH (etcd from ETCD_BIN when set), so none is started here. They run on
# etcd 3.4 (Debian bookworm's package), then again on etcd 3.5.
#
#   scripts/test.sh                 # everything
#   scripts/test.sh -- --nocapture  # pass args through to cargo test
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ensure_prereqs

step() { printf '\n=== %s ===\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --all-targets --all-features -- -D warnings

# Each feature set a library user can choose compiles without warnings and
# passes its unit tests on its own: a cfg mistake (code only one backend
# calls, a type only one backend names) hides in the all-features build.
# The integration tests need both servers' backends, so --lib here.
feature_sets=(
  "--no-default-features"                    # the memory backend only
  "--no-default-features --features etcd"    # needs protoc
  "--no-default-features --features redis"   # no protoc needed
  ""                                         # default features
)
for set in "${feature_sets[@]}"; do
  read -ra flags <<<"$set"
  step "cargo clippy and unit tests, features: ${set:-default}"
  cargo clippy "${flags[@]}" -- -D warnings
  cargo test "${flags[@]}" --lib
done

step "cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features

step "cargo test"
cargo test --all-features "$@"

# The fault suite's short runs (one injection per fault, both modes; a
# violation prints both workers' events and the lock key's history): on
# loopback, then as root on a network of namespaces, then a short soak.
# FAIRLOCK_FAULTS=0 skips them; scripts/faults.sh --long is the long run.
if [[ "${FAIRLOCK_FAULTS:-1}" != 0 ]]; then
  step "fault injection on a 3-member etcd cluster, loopback and network (short runs, about 7 minutes)"
  scripts/faults.sh
fi

# etcd 3.5: the same tests and the fault runs (without the soak) again,
# against Debian trixie's etcd 3.5 (ensure_etcd35 in scripts/lib.sh fetches
# it once). The runs above used Debian bookworm's etcd 3.4; most clusters,
# and etcd-compose.yml, run 3.5. FAIRLOCK_ETCD35=0 skips it.
if [[ "${FAIRLOCK_ETCD35:-1}" != 0 ]]; then
  etcd35=$(ensure_etcd35)
  step "cargo test against $("$etcd35" --version | sed -n 1p)"
  ETCD_BIN=$etcd35 cargo test --all-features "$@"
  if [[ "${FAIRLOCK_FAULTS:-1}" != 0 ]]; then
    step "fault injection, loopback and network, etcd 3.5 (about 4 minutes)"
    ETCD_BIN=$etcd35 FAIRLOCK_SOAK=0 scripts/faults.sh
  fi
fi

# Valkey 8 (Debian bookworm-backports, installed by ensure_valkey in
# scripts/lib.sh): the Redis test files again, every deployment (one
# instance, Redlock, cluster, sentinel, TLS, the command) on valkey-server.
# FAIRLOCK_VALKEY=0 skips it.
if [[ "${FAIRLOCK_VALKEY:-1}" != 0 ]]; then
  valkey=$(ensure_valkey)
  step "Redis tests against $("$valkey" --version)"
  started=$SECONDS
  REDIS_BIN=$valkey cargo test --all-features --test redis --test redlock --test redis_connect \
    --test redis_foreign --test redis_hostile --test redis_cluster --test redis_sentinel \
    --test tls_redis --test cli_redis "$@"
  printf 'Valkey round: %d s\n' $((SECONDS - started))
fi

step "all checks passed"
