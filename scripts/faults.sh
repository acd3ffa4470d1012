#!/usr/bin/env bash
# Fault injection on a 3-member etcd cluster (examples/faults): SIGSTOP and
# kill -9 of the etcd leader, a follower and the lock holder, with checkers
# for lost updates, overlapping critical sections, fair order, recovery
# time and leftovers. Prints a table; exits non-zero on any violation.
#
#   scripts/faults.sh          # short run (about 2 minutes)
#   scripts/faults.sh --long   # 5 injections per fault (about 8 minutes)
#
# Other arguments go to the example (see its --help). The cluster is its
# own, on free loopback ports; FAIRLOCK_ENDPOINTS is not used.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ensure_prereqs

# A debug build: `cargo test` has built it already, and the run's timing
# comes from the faults, not from the code's speed.
cargo run --quiet --example faults -- "$@"
