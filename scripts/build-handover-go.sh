#!/usr/bin/env bash
# Builds the Go peer of examples/handover.rs (examples/handover-go: etcd's
# own clientv3/concurrency.Election) offline, from Debian's Go toolchain and
# etcd 3.4 source packages. Prints the binary's path.
#   usage: scripts/build-handover-go.sh [OUT_DIR]   (default: target/handover-go)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/target/handover-go}
if ! command -v go >/dev/null || [ ! -d /usr/share/gocode/src/go.etcd.io/etcd/clientv3 ]; then
  echo "needs: apt-get install golang-go golang-etcd-server-dev" >&2
  exit 1
fi
mkdir -p "$out"
cd "$root/examples/handover-go"
GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE="${GOCACHE:-/tmp/go-cache}" \
  go build -o "$out/handover-go" .
echo "$out/handover-go"
