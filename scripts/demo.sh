#!/usr/bin/env bash
# Run `fairlock demo` against etcd: processes that ask for one lock again as
# soon as they release it, fair mode then unfair mode; prints every grant
# against the order etcd saw the requests arrive, a verdict per mode and a
# summary. Uses FAIRLOCK_ENDPOINTS if set (etcd endpoints); otherwise starts
# a throwaway local etcd that is stopped and deleted when this script exits.
# Args go to `fairlock demo` (e.g. --processes 4 --tasks 10 --svg ordering.svg).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ensure_prereqs
start_etcd

# Not `exec`: the EXIT trap must survive to stop etcd afterwards.
status=0
cargo run --release --quiet --features cli --bin fairlock -- demo "$@" || status=$?
exit "$status"
