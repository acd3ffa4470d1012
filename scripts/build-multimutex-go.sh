#!/usr/bin/env bash
# Builds the Go peer of the bench's several-keys rows (examples/multimutex-go:
# etcd's own Go concurrency.Mutex, one key after the other, etcd 3.4's
# clientv3/concurrency) offline, from Debian's Go toolchain and etcd source
# packages. Prints the binary's path.
#   usage: scripts/build-multimutex-go.sh [OUT_DIR]   (default: target/multimutex-go)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/target/multimutex-go}
if ! command -v go >/dev/null || [[ ! -d /usr/share/gocode/src/go.etcd.io/etcd/clientv3/concurrency ]]; then
  echo "needs: apt-get install golang-go golang-etcd-server-dev" >&2
  exit 1
fi
mkdir -p "$out"
cd "$root/examples/multimutex-go"
GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE="${GOCACHE:-/tmp/fairlock-go-cache}" \
  go build -o "$out/multimutex-go" .
echo "$out/multimutex-go"
