#!/usr/bin/env bash
# Builds the benchmark's Go peer (examples/bench/go-peer: etcd's own
# clientv3/concurrency.Mutex) offline, from Debian's Go toolchain and etcd
# source packages (installed when running as root). Prints the binary's path.
#   usage: scripts/build-go-peer.sh [OUT_DIR]   (default: target/go-peer)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/target/go-peer}
if ! command -v go >/dev/null || [[ ! -d /usr/share/gocode/src/go.etcd.io/etcd/clientv3 ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go golang-etcd-server-dev >/dev/null </dev/null
  else
    echo "needs: sudo apt-get install golang-go golang-etcd-server-dev" >&2
    exit 1
  fi
fi
mkdir -p "$out"
cd "$root/examples/bench/go-peer"
GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE="${GOCACHE:-/tmp/fairlock-go-cache}" \
  go build -o "$out/go-mutex" .
echo "$out/go-mutex"
