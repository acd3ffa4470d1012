#!/usr/bin/env bash
# Builds the Go peer of the bench's read/write rows (examples/rwmutex-go:
# etcd's own Go recipe.RWMutex, etcd 3.4's contrib/recipes) offline, from
# Debian's Go toolchain and etcd source packages. Prints the binary's path.
#   usage: scripts/build-rwmutex-go.sh [OUT_DIR]   (default: target/rwmutex-go)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/target/rwmutex-go}
if ! command -v go >/dev/null || [[ ! -d /usr/share/gocode/src/go.etcd.io/etcd/contrib/recipes ]]; then
  echo "needs: apt-get install golang-go golang-etcd-server-dev" >&2
  exit 1
fi
mkdir -p "$out"
cd "$root/examples/rwmutex-go"
GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE="${GOCACHE:-/tmp/fairlock-go-cache}" \
  go build -o "$out/rwmutex-go" .
echo "$out/rwmutex-go"
