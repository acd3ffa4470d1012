#!/usr/bin/env bash
# Run the `ordering` example (fair vs unfair mode, prints verdicts) against etcd.
# Uses FAIRLOCK_ENDPOINTS if set; otherwise starts a throwaway local etcd that
# is stopped and deleted when this script exits. Args go to the example.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ensure_prereqs
start_etcd

# Not `exec`: the EXIT trap must survive to stop etcd afterwards.
status=0
cargo run --release --quiet --example ordering -- "$@" || status=$?
exit "$status"
