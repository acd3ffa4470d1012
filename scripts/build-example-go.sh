#!/usr/bin/env bash
# Builds one of the Go peers under examples/ offline, from Debian's Go
# toolchain and etcd 3.4 source packages (golang-go,
# golang-etcd-server-dev). Prints the binary's path.
#   usage: scripts/build-example-go.sh NAME [OUT_DIR]   (default: target/NAME)
# NAME is the folder under examples/:
#   handover-go    etcd's clientv3/concurrency.Election (examples/handover.rs)
#   rwmutex-go     etcd's contrib/recipes RWMutex (the bench's read/write rows)
#   multimutex-go  etcd's concurrency.Mutex, one key after the other (the
#                  bench's several-keys rows)
#   recipe-go      etcd's Mutex and Election driven line by line (the
#                  mixed-fleet tests of etcd's layout)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
name=${1:?usage: scripts/build-example-go.sh NAME [OUT_DIR]}
out=${2:-$root/target/$name}
if [[ ! -f "$root/examples/$name/main.go" ]]; then
  echo "no Go peer examples/$name/main.go" >&2
  exit 1
fi
gocode=/usr/share/gocode/src/go.etcd.io/etcd
if ! command -v go >/dev/null || [[ ! -d $gocode/clientv3/concurrency || ! -d $gocode/contrib/recipes ]]; then
  echo "needs: apt-get install golang-go golang-etcd-server-dev" >&2
  exit 1
fi
mkdir -p "$out"
cd "$root/examples/$name"
# Built beside, then renamed: test binaries that run at once each build it,
# and a rename never leaves another one a half-written binary.
GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE="${GOCACHE:-/tmp/fairlock-go-cache}" \
  go build -o "$out/$name.$$" .
mv -f "$out/$name.$$" "$out/$name"
echo "$out/$name"
