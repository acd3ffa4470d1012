# shellcheck shell=bash
# Shared helpers for scripts/test.sh, scripts/demo.sh and .ci/run.
# Source this file; do not run it.
#
#   ensure_prereqs  make sure etcd, etcdctl, redis-server, protoc, python3,
#                   openssl, curl, gpgv, xz and cargo exist (as root also ip
#                   and nft, for the network fault tests)
#                   (installs the Debian packages when running as root)
#   start_etcd      start a throwaway single-node etcd on free loopback ports,
#                   export FAIRLOCK_ENDPOINTS, and stop/clean it up on EXIT
#   ensure_etcd35   fetch Debian trixie's etcd 3.5 server once (checked
#                   against Debian's signatures) and print its path
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
    [redis-cli]=redis-tools [redis-sentinel]=redis-sentinel
  )
  local cmd pkgs=() cmds=(etcd etcdctl redis-server redis-cli redis-sentinel protoc python3
    openssl curl gpgv xz)
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

# etcd 3.5 for the second run of the etcd tests (scripts/test.sh). Debian
# bookworm's package, which ensure_prereqs installs, is etcd 3.4; most
# clusters run 3.5 (Kubernetes ships it). Debian trixie (stable since 2025)
# packages 3.5, and its etcd binary is static, so it runs here unpacked,
# without installing the package or adding trixie to apt's sources.
#
# The pinned package is fetched first and checked against its SHA-256.
# When trixie has replaced it (a point release), the current one is found
# the way apt finds it: trixie's InRelease, checked with gpgv against the
# Debian archive keyring, gives the SHA-256 of the package index, which
# gives the package's. The binary stays under target/ for the next run.
ETCD35_PIN="3.5.16-4 0875921bb0d023f2af9b8e15cdfbe417a03e65731345fb832c40f9c2dd72967b"
# A subshell, so that its EXIT trap removes the download directory however
# it ends (die included), without touching the caller's traps.
ensure_etcd35() (
  local mirror=https://deb.debian.org/debian arch version sha file dir found
  arch=$(dpkg --print-architecture 2>/dev/null) || die "dpkg not found: the etcd 3.5 run needs Debian (or FAIRLOCK_ETCD35=0 to skip it)"
  found=$(compgen -G "$PWD/target/etcd35/*/$arch/usr/bin/etcd" | tail -n 1) || true
  if [[ -n "$found" ]] && "$found" --version >/dev/null 2>&1; then
    printf '%s\n' "$found"
    exit 0
  fi
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/fairlock-etcd35.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  read -r version sha <<<"$ETCD35_PIN"
  file="pool/main/e/etcd/etcd-server_${version}_${arch}.deb"
  if [[ "$arch" != amd64 ]] ||
    ! curl -fsS --retry 3 -o "$tmp/etcd.deb" "$mirror/$file" 2>/dev/null; then
    log "etcd-server $version ($arch) is not on $mirror; looking up trixie's current one"
    curl -fsS --retry 3 -o "$tmp/InRelease" "$mirror/dists/trixie/InRelease" ||
      die "could not fetch $mirror/dists/trixie/InRelease (FAIRLOCK_ETCD35=0 skips the etcd 3.5 run)"
    gpgv --keyring /usr/share/keyrings/debian-archive-keyring.gpg \
      --output "$tmp/Release" "$tmp/InRelease" 2>/dev/null ||
      die "trixie's InRelease failed its signature check (is debian-archive-keyring installed?)"
    sha=$(awk -v f="main/binary-$arch/Packages.xz" '/^SHA256:/ {s = 1; next} /^[^ ]/ {s = 0}
      s && $3 == f {print $1}' "$tmp/Release")
    curl -fsS --retry 3 -o "$tmp/Packages.xz" "$mirror/dists/trixie/main/binary-$arch/Packages.xz" &&
      echo "$sha  $tmp/Packages.xz" | sha256sum -c --quiet - >/dev/null 2>&1 ||
      die "trixie's package index did not match its signed checksum"
    read -r version file sha < <(xz -dc "$tmp/Packages.xz" | awk '
      /^Package: / {p = ($2 == "etcd-server")} p && /^Version: / {v = $2}
      p && /^Filename: / {f = $2} p && /^SHA256: / {s = $2}
      /^$/ && p && v ~ /^3\.5\./ {print v, f, s; exit}')
    [[ -n "${sha:-}" ]] || die "trixie has no etcd-server 3.5 package for $arch"
    curl -fsS --retry 3 -o "$tmp/etcd.deb" "$mirror/$file" || die "could not fetch $mirror/$file"
  fi
  echo "$sha  $tmp/etcd.deb" | sha256sum -c --quiet - >/dev/null 2>&1 ||
    die "etcd-server $version: the package does not match its SHA-256"
  dir="$PWD/target/etcd35/$version/$arch"
  mkdir -p "$dir" && dpkg-deb -x "$tmp/etcd.deb" "$dir" ||
    { rm -rf "$dir"; die "could not unpack etcd-server $version into $dir"; }
  "$dir/usr/bin/etcd" --version >/dev/null 2>&1 ||
    { rm -rf "$dir"; die "the unpacked $dir/usr/bin/etcd does not run"; }
  log "etcd-server $version unpacked in $dir"
  printf '%s\n' "$dir/usr/bin/etcd"
)

# The URI of the machine's own Debian archive source for suite $1 (e.g.
# bookworm): from deb822 files in /etc/apt/sources.list.d/*.sources (a
# stanza whose Suites list $1) or from one-line entries in
# /etc/apt/sources.list and sources.list.d/*.list (`deb [opts] URI $1 ...`).
debian_uri() {
  local suite=$1 f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -r "$f" ]] || continue
    uri=$(awk -v suite="$suite" '
      function flush() { if (deb && has_suite && uri != "") { print uri; found = 1; exit } }
      /^[ \t]*$/ { flush(); deb = 0; has_suite = 0; uri = ""; next }
      /^[ \t]*#/ { next }
      tolower($1) == "types:" { deb = 0; for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
      tolower($1) == "uris:" { uri = $2 }
      tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == suite) has_suite = 1 }
      END { if (!found) flush() }' "$f")
    [[ -n "$uri" ]] && { printf '%s\n' "$uri"; return 0; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -r "$f" ]] || continue
    uri=$(awk -v suite="$suite" '$1 == "deb" {
        i = 2; if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i + 1) == suite) { print $i; exit } }' "$f")
    [[ -n "$uri" ]] && { printf '%s\n' "$uri"; return 0; }
  done
  return 1
}

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
      uri=$(debian_uri "$codename") ||
        die "no Debian apt source for $codename found in /etc/apt/sources.list(.d) to reuse for $codename-backports"
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
