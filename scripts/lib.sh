# shellcheck shell=bash
# Shared helpers for scripts/test.sh, scripts/demo.sh and .ci/run.
# Source this file; do not run it.
#
#   ensure_prereqs  make sure etcd, etcdctl, redis-server, protoc, python3,
#                   openssl and cargo exist (as root also ip and nft, for the
#                   network fault tests)
#                   (installs the Debian packages when running as root)
#   start_etcd      start a throwaway single-node etcd on free loopback ports,
#                   export FAIRLOCK_ENDPOINTS, and stop/clean it up on EXIT

# rustup installs cargo in ~/.cargo/bin, which non-login shells (CI) may miss.
if [[ -d "${HOME:-}/.cargo/bin" && ":$PATH:" != *":$HOME/.cargo/bin:"* ]]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

ensure_prereqs() {
  # command -> Debian package providing it
  local -A pkg_of=(
    [etcd]=etcd-server [etcdctl]=etcd-client [redis-server]=redis-server
    [protoc]=protobuf-compiler [python3]=python3 [openssl]=openssl
    [ip]=iproute2 [nft]=nftables
  )
  local cmd pkgs=() cmds=(etcd etcdctl redis-server protoc python3 openssl)
  # The network fault tests (namespaces) run only as root, and need these.
  [[ $(id -u) -ne 0 ]] || cmds+=(ip nft)
  for cmd in "${cmds[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || pkgs+=("${pkg_of[$cmd]}")
  done

  if ((${#pkgs[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
      printf 'error: missing tools. Install them with:\n  sudo apt-get install -y %s\n' \
        "${pkgs[*]}" >&2
      command -v cargo >/dev/null 2>&1 ||
        printf 'and install Rust (cargo) via rustup: https://rustup.rs\n' >&2
      exit 1
    fi
    log "installing ${pkgs[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" </dev/null
  fi

  command -v cargo >/dev/null 2>&1 ||
    die "cargo not found; install Rust via rustup (https://rustup.rs), then retry"
  return 0
}

# Print N distinct free TCP ports on 127.0.0.1 (all bound at once, so
# distinct), from below the kernel's ephemeral range: a port there is taken
# only by an explicit bind, never by an outgoing connection before etcd binds
# it (as tests/support/mod.rs picks them).
free_ports() {
  python3 - "$1" <<'EOF'
import random, socket, sys
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        high = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    high = 32768
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    for _ in range(1000 if high > 21000 else 0):
        try:
            s.bind(("127.0.0.1", random.randrange(20000, high)))
            break
        except OSError:
            pass
    else:
        s.bind(("127.0.0.1", 0))
    socks.append(s)
print(*(s.getsockname()[1] for s in socks))
EOF
}

# Kill the etcd started by start_etcd and remove its temp dir (EXIT trap).
stop_etcd() {
  if [[ -n "${FAIRLOCK_ETCD_PID:-}" ]]; then
    kill "$FAIRLOCK_ETCD_PID" 2>/dev/null || true
    wait "$FAIRLOCK_ETCD_PID" 2>/dev/null || true
    FAIRLOCK_ETCD_PID=
  fi
  if [[ -n "${FAIRLOCK_ETCD_DIR:-}" ]]; then
    rm -rf "$FAIRLOCK_ETCD_DIR"
    FAIRLOCK_ETCD_DIR=
  fi
}

# Start a throwaway etcd unless FAIRLOCK_ENDPOINTS is already set.
# Note: installs an EXIT trap (replacing any existing one).
start_etcd() {
  if [[ -n "${FAIRLOCK_ENDPOINTS:-}" ]]; then
    log "using existing etcd at $FAIRLOCK_ENDPOINTS"
    return 0
  fi

  local cport pport endpoint
  read -r cport pport < <(free_ports 2) || true
  [[ -n "${pport:-}" ]] || die "could not pick free ports (needs python3)"
  endpoint="127.0.0.1:$cport"
  FAIRLOCK_ETCD_DIR=$(mktemp -d "${TMPDIR:-/tmp}/fairlock-etcd.XXXXXX")

  # Clean up on normal exit, and turn Ctrl-C / TERM into an exit so it runs too.
  trap stop_etcd EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  log "starting etcd on $endpoint (data in $FAIRLOCK_ETCD_DIR)"
  etcd --name demo --data-dir "$FAIRLOCK_ETCD_DIR/data" \
    --listen-client-urls "http://$endpoint" \
    --advertise-client-urls "http://$endpoint" \
    --listen-peer-urls "http://127.0.0.1:$pport" \
    --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "demo=http://127.0.0.1:$pport" \
    --logger zap --log-level error \
    >"$FAIRLOCK_ETCD_DIR/etcd.log" 2>&1 </dev/null &
  FAIRLOCK_ETCD_PID=$!

  # Wait up to ~20 s for it to answer a health check.
  local deadline=$((SECONDS + 20))
  until etcdctl --endpoints "$endpoint" --dial-timeout 1s --command-timeout 2s \
    endpoint health >/dev/null 2>&1; do
    if ! kill -0 "$FAIRLOCK_ETCD_PID" 2>/dev/null || ((SECONDS >= deadline)); then
      printf 'error: etcd did not become ready; last log lines:\n' >&2
      tail -n 20 "$FAIRLOCK_ETCD_DIR/etcd.log" >&2 || true
      exit 1
    fi
    sleep 0.2
  done

  export FAIRLOCK_ENDPOINTS="$endpoint"
  log "etcd ready: FAIRLOCK_ENDPOINTS=$FAIRLOCK_ENDPOINTS"
}
