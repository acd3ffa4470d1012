# shellcheck shell=bash
# Shared helpers for scripts/test.sh, scripts/demo.sh and .ci/run.
# Source this file; do not run it.
#
#   ensure_prereqs  make sure etcd, etcdctl, redis-server, redis-cli,
#                   redis-sentinel, protoc, python3, openssl, curl, gpgv, xz
#                   and cargo exist (as root also ip
#                   and nft, for the network fault tests)
#                   (installs the Debian packages when running as root)
#   start_etcd      start a throwaway single-node etcd on free loopback ports,
#                   export FAIRLOCK_ENDPOINTS, and stop/clean it up on EXIT
#   debian_mirror   the Debian archive URI of this machine's apt sources
#   ensure_debian_etcd RELEASE
#                   fetch Debian RELEASE's etcd server once (checked against
#                   Debian's signatures) and print its path
#   ensure_valkey   install Valkey 8 (server, cli, sentinel) from Debian
#                   bookworm-backports and print valkey-server's path

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
    [ip]=iproute2 [nft]=nftables [curl]=curl [gpgv]=gpgv [xz]=xz-utils
    [redis-cli]=redis-tools [redis-sentinel]=redis-sentinel [go]=golang-go
  )
  local cmd pkgs=() cmds=(etcd etcdctl redis-server redis-cli redis-sentinel protoc python3
    openssl curl gpgv xz go)
  # The network fault tests (namespaces) run only as root, and need these.
  [[ $(id -u) -ne 0 ]] || cmds+=(ip nft)
  for cmd in "${cmds[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || pkgs+=("${pkg_of[$cmd]}")
  done

  # etcd's Go recipes, built offline for the mixed-fleet tests of etcd's
  # layout (scripts/build-example-go.sh).
  [[ -d /usr/share/gocode/src/go.etcd.io/etcd/clientv3/concurrency ]] ||
    pkgs+=(golang-etcd-server-dev)
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

# The URI of Debian's main archive in this machine's apt sources: the
# mirror apt itself uses (none is written into this repository). apt reads
# both source formats; `indextargets` lists what `apt-get update` fetches,
# with the release each entry names, so pick the entry of this release.
debian_mirror() {
  local codename uri
  codename=$(. /etc/os-release 2>/dev/null && printf '%s' "${VERSION_CODENAME:-}")
  # shellcheck disable=SC2016 # apt's own $(FIELD) placeholders
  uri=$(apt-get indextargets --format '$(RELEASE) $(REPO_URI)' 'Identifier: Packages' 2>/dev/null |
    awk -v c="$codename" '$1 == c {print $2; exit}')
  [[ -n "$uri" ]] ||
    die "no Debian archive for release '${codename:-unknown}' in apt's sources (apt-get indextargets)"
  printf '%s\n' "${uri%/}"
}

# etcd 3.5 servers for the runs of scripts/test.sh beyond Debian bookworm's
# etcd 3.4 (which ensure_prereqs installs): Debian trixie's 3.5.16 and
# forky's 3.5.30, the newest 3.5 Debian has (with etcd's March 2026 auth
# changes: Maintenance.Status is for root only there). Their etcd binary is
# static, so it runs here unpacked, without installing the package or
# adding the release to apt's sources.
#
# The pinned package is fetched first and checked against its SHA-256.
# When the release has replaced it, its current one is found the way apt
# finds it: the release's InRelease, checked with gpgv against the Debian
# archive keyring, gives the SHA-256 of the package index, which gives the
# package's. The binary stays under target/etcd/ for the next run.
declare -A ETCD_PIN=(
  [trixie]="3.5.16-4 0875921bb0d023f2af9b8e15cdfbe417a03e65731345fb832c40f9c2dd72967b"
  [forky]="3.5.30-2 11a4f7e350c5020b83edff5160a6063d4e56ac9cd014d21ce8916378bf96de79"
)
# ensure_debian_etcd RELEASE prints the path of that release's etcd.
# A subshell, so that its EXIT trap removes the download directory however
# it ends (die included), without touching the caller's traps.
ensure_debian_etcd() (
  local release=$1 mirror arch version sha file dir found
  [[ -n "${ETCD_PIN[$release]:-}" ]] || die "no etcd pinned for Debian '$release'"
  arch=$(dpkg --print-architecture 2>/dev/null) || die "dpkg not found: the etcd 3.5 runs need Debian (or FAIRLOCK_ETCD35=0 to skip them)"
  found=$(compgen -G "$PWD/target/etcd/$release/*/$arch/usr/bin/etcd" | tail -n 1) || true
  if [[ -n "$found" ]] && "$found" --version >/dev/null 2>&1; then
    printf '%s\n' "$found"
    exit 0
  fi
  mirror=$(debian_mirror)
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/fairlock-etcd.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  read -r version sha <<<"${ETCD_PIN[$release]}"
  file="pool/main/e/etcd/etcd-server_${version}_${arch}.deb"
  if [[ "$arch" != amd64 ]] ||
    ! curl -fsS --retry 3 -o "$tmp/etcd.deb" "$mirror/$file" 2>/dev/null; then
    log "etcd-server $version ($arch) is not on $mirror; looking up $release's current one"
    curl -fsS --retry 3 -o "$tmp/InRelease" "$mirror/dists/$release/InRelease" ||
      die "could not fetch $mirror/dists/$release/InRelease (FAIRLOCK_ETCD35=0 skips the etcd 3.5 runs)"
    gpgv --keyring /usr/share/keyrings/debian-archive-keyring.gpg \
      --output "$tmp/Release" "$tmp/InRelease" 2>/dev/null ||
      die "$release's InRelease failed its signature check (is debian-archive-keyring installed?)"
    sha=$(awk -v f="main/binary-$arch/Packages.xz" '/^SHA256:/ {s = 1; next} /^[^ ]/ {s = 0}
      s && $3 == f {print $1}' "$tmp/Release")
    curl -fsS --retry 3 -o "$tmp/Packages.xz" "$mirror/dists/$release/main/binary-$arch/Packages.xz" &&
      echo "$sha  $tmp/Packages.xz" | sha256sum -c --quiet - >/dev/null 2>&1 ||
      die "$release's package index did not match its signed checksum"
    read -r version file sha < <(xz -dc "$tmp/Packages.xz" | awk '
      /^Package: / {p = ($2 == "etcd-server")} p && /^Version: / {v = $2}
      p && /^Filename: / {f = $2} p && /^SHA256: / {s = $2}
      /^$/ && p && v ~ /^3\./ {print v, f, s; exit}')
    [[ -n "${sha:-}" ]] || die "$release has no etcd-server 3.x package for $arch"
    curl -fsS --retry 3 -o "$tmp/etcd.deb" "$mirror/$file" || die "could not fetch $mirror/$file"
  fi
  echo "$sha  $tmp/etcd.deb" | sha256sum -c --quiet - >/dev/null 2>&1 ||
    die "etcd-server $version: the package does not match its SHA-256"
  dir="$PWD/target/etcd/$release/$version/$arch"
  mkdir -p "$dir" && dpkg-deb -x "$tmp/etcd.deb" "$dir" ||
    { rm -rf "$dir"; die "could not unpack etcd-server $version into $dir"; }
  "$dir/usr/bin/etcd" --version >/dev/null 2>&1 ||
    { rm -rf "$dir"; die "the unpacked $dir/usr/bin/etcd does not run"; }
  log "etcd-server $version ($release) unpacked in $dir"
  printf '%s\n' "$dir/usr/bin/etcd"
)

# Valkey 8 for the Valkey round of scripts/test.sh: valkey-server,
# valkey-tools (valkey-cli) and valkey-sentinel from Debian's
# <codename>-backports, whose apt source (added once, as
# /etc/apt/sources.list.d/fairlock-backports.sources) reuses the URI of the
# machine's own Debian source: no mirror is named here. Prints the path of
# valkey-server.
ensure_valkey() {
  local codename uri list=/etc/apt/sources.list.d/fairlock-backports.sources
  if ! command -v valkey-server >/dev/null 2>&1 || ! command -v valkey-cli >/dev/null 2>&1 ||
    ! command -v valkey-sentinel >/dev/null 2>&1; then
    [[ $(id -u) -eq 0 ]] ||
      die "Valkey is missing; as root, add Debian's backports to apt's sources and run: apt-get install -t <codename>-backports valkey-server valkey-tools valkey-sentinel (FAIRLOCK_VALKEY=0 skips the Valkey round)"
    codename=$(. /etc/os-release && printf '%s' "${VERSION_CODENAME:-}")
    [[ -n "$codename" ]] || die "cannot tell the Debian release (no VERSION_CODENAME in /etc/os-release)"
    if ! grep -rqsE "^[^#]*[[:space:]]${codename}-backports([[:space:]]|\$)" \
      /etc/apt/sources.list /etc/apt/sources.list.d/; then
      uri=$(debian_mirror)
      log "adding $codename-backports from $uri to apt's sources ($list)"
      printf 'Types: deb\nURIs: %s\nSuites: %s-backports\nComponents: main\nSigned-By: %s\n' \
        "$uri" "$codename" /usr/share/keyrings/debian-archive-keyring.gpg >"$list"
    fi
    log "installing valkey-server valkey-tools valkey-sentinel from $codename-backports"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t "$codename-backports" \
      valkey-server valkey-tools valkey-sentinel </dev/null >&2 ||
      die "could not install Valkey from $codename-backports"
  fi
  command -v valkey-server
}
