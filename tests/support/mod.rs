//! Test support: a real etcd process on free loopback ports.
//!
//! The etcd binary comes from `ETCD_BIN` or PATH. It runs under a small
//! shell wrapper that kills it and removes its data dir as soon as the test
//! process exits (the wrapper reads our end of a pipe until EOF), so no
//! server outlives the tests even when one fails.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::Duration;

use etcd_client::{Client, GetOptions, WatchOptions};

// Only in test binaries: examples/faults includes this module too, and
// CARGO_BIN_EXE_fairlock is set for integration tests alone.
#[cfg(all(test, feature = "cli"))]
pub mod cli;
pub mod cluster;
pub mod emulate;
pub mod etcd_backend;
pub mod etcd_elections;
pub mod net;
pub mod peers;
pub mod proxy;
#[cfg(feature = "redis")]
pub mod redis_backend;
#[cfg(feature = "redis")]
pub mod redis_cluster;
#[cfg(feature = "redis")]
pub mod redis_sentinel;
#[cfg(feature = "redis")]
pub mod redis_server;
pub mod tls;

/// A critical section on a shared directory `$D`: a non-atomic
/// read-sleep-write of `$D/count`, and `$D/overlaps` written when another
/// section was inside at the same time. Run by `sh -c`, under a lock.
pub const SECTION: &str = r#"mkdir "$D/inside" || echo overlap >> "$D/overlaps"
    n=$(cat "$D/count"); sleep 0.05; echo $((n + 1)) > "$D/count"
    rmdir "$D/inside""#;

/// A running etcd.
pub struct Etcd {
    /// Where clients connect: etcd itself, or the relay that answers as a
    /// newer etcd when `FAIRLOCK_ETCD_EMULATE` names one (see `emulate.rs`).
    pub endpoint: String,
    /// etcd's own client address, never relayed (for its `/metrics`).
    pub direct: String,
    /// The relay behind `endpoint`, when emulating.
    relay: Option<emulate::Relay>,
    pid: u32,
    wrapper: Wrapper,
    /// Receivers of every log line etcd writes after it serves clients.
    log: LogTap,
}

type LogTap = std::sync::Arc<Mutex<Vec<mpsc::Sender<String>>>>;

/// A loopback port that was free a moment ago, never handed out twice by
/// this process.
///
/// It comes from below the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`, 32768-60999 by default), not from
/// `bind(0)`, which picks inside that range: there an outgoing connection,
/// of the thousands the tests open, can take the port between this check
/// and the server's own bind, and the server then fails with "address
/// already in use". Below the range only an explicit bind takes a port.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    const LOW: u16 = 20_000;
    let high = ephemeral_low().unwrap_or(32_768);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    if high > LOW {
        let span = u128::from(high - LOW);
        for _ in 0..1_000 {
            let offset = u16::try_from(uuid::Uuid::new_v4().as_u128() % span).unwrap_or(0);
            let port = LOW + offset;
            if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
                given.insert(port);
                return port;
            }
        }
    }
    // No room below the range: the kernel's pick.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port");
    given.insert(port);
    port
}

/// What etcd and redis-server log when a port is taken.
const ADDRESS_IN_USE: &str = "address already in use";

/// Runs `start` again, 3 tries in all, while it fails because a port it
/// got from [`free_port`] was taken before the server bound it (by another
/// process's explicit bind); otherwise its result.
pub fn on_free_ports<T, E: std::fmt::Display>(
    mut start: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    for _ in 1..3 {
        match start() {
            Err(e) if e.to_string().to_lowercase().contains(ADDRESS_IN_USE) => {}
            done => return done,
        }
    }
    start()
}

/// The first port of the kernel's ephemeral range.
fn ephemeral_low() -> Option<u16> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The server binary named by the environment variable `var`, else
/// `default` from PATH; panics saying how to install it (`package`) when it
/// does not run.
fn server_bin(var: &str, default: &str, what: &str, package: &str) -> String {
    let bin = std::env::var(var).unwrap_or_else(|_| default.into());
    let found = Command::new(&bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "the tests need a real {what} binary, and `{bin}` was not found. \
         Install it with `apt-get install {package}` (Debian/Ubuntu), or set {var} \
         to its path. scripts/test.sh installs it for you."
    );
    bin
}

fn etcd_bin() -> String {
    server_bin("ETCD_BIN", "etcd", "etcd server", "etcd-server")
}

/// Our end of a server's shell wrapper (see the module docs): stopping it,
/// or dropping it, kills the server and waits for the wrapper to be gone.
struct Wrapper(Mutex<Option<(Child, ChildStdin)>>);

impl Wrapper {
    fn new(child: Child, stdin: ChildStdin) -> Wrapper {
        Wrapper(Mutex::new(Some((child, stdin))))
    }

    fn stop(&self) {
        if let Some((mut child, mut stdin)) = self.0.lock().unwrap().take() {
            let _ = stdin.write_all(b"stop\n");
            drop(stdin);
            let _ = child.wait();
        }
    }
}

impl Drop for Wrapper {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends `sig` (e.g. "-STOP", "-CONT") to process `pid`.
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid}");
}

impl Etcd {
    /// Starts a fresh single-member etcd and waits until it serves clients.
    pub fn start() -> Etcd {
        Etcd::start_with(None, &[])
    }

    /// [`Etcd::start`] with `extra` arguments for etcd.
    pub fn start_args(extra: &[&str]) -> Etcd {
        Etcd::start_with(None, extra)
    }

    /// Starts a fresh single-member etcd serving clients over TLS
    /// (`https://127.0.0.1:port`) with the certificate and key `server`,
    /// trusting `ca` for client certificates, and `extra` arguments (e.g.
    /// `--client-cert-auth`, `--auth-token simple,ttl=...`... see etcd's).
    pub fn start_tls(server: (&Path, &Path), ca: &Path, extra: &[&str]) -> Etcd {
        Etcd::start_with(Some((server, ca)), extra)
    }

    fn start_with(tls: Option<((&Path, &Path), &Path)>, extra: &[&str]) -> Etcd {
        on_free_ports(|| Etcd::try_start(tls, extra))
            .unwrap_or_else(|log| panic!("etcd exited before serving clients:\n{log}"))
    }

    /// Starts etcd; `Err` holds its log when it exits before serving.
    fn try_start(tls: Option<((&Path, &Path), &Path)>, extra: &[&str]) -> Result<Etcd, String> {
        let bin = etcd_bin();
        let (client, peer) = (free_port(), free_port());
        let dir = tempfile::Builder::new()
            .prefix("fairlock-test-etcd-")
            .tempdir()
            .expect("temp dir")
            .keep();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let curl = format!("{scheme}://127.0.0.1:{client}");
        let mut tls_args: Vec<std::ffi::OsString> = Vec::new();
        if let Some(((cert, key), ca)) = tls {
            tls_args.extend(["--cert-file".into(), cert.into()]);
            tls_args.extend(["--key-file".into(), key.into()]);
            tls_args.extend(["--trusted-ca-file".into(), ca.into()]);
        }
        let purl = format!("http://127.0.0.1:{peer}");
        let script = r#"
            "$ETCD" "$@" & pid=$!
            echo "pid $pid" >&2
            exec 2>/dev/null
            read -r _ || true
            kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
            rm -rf "$DATA"
        "#;
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(script)
            .arg("etcd-wrapper")
            .args(["--name", "test", "--data-dir"])
            .arg(dir.join("data"))
            .args([
                "--listen-client-urls",
                &curl,
                "--advertise-client-urls",
                &curl,
            ])
            .args([
                "--listen-peer-urls",
                &purl,
                "--initial-advertise-peer-urls",
                &purl,
            ])
            .args(["--initial-cluster", &format!("test={purl}")])
            .args(["--logger", "zap", "--log-level", "info"])
            .args(&tls_args)
            .args(extra)
            .env("ETCD", &bin)
            .env("DATA", &dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn etcd wrapper");
        let stdin = child.stdin.take().expect("wrapper stdin");
        let stderr = BufReader::new(child.stderr.take().expect("wrapper stderr"));
        // Dropped on an early return: kills etcd and removes its data.
        let wrapper = Wrapper::new(child, stdin);
        // Read etcd's log until it says it serves clients; keep draining it
        // afterwards so etcd never blocks on a full pipe.
        let (tx, rx) = mpsc::channel();
        let log = LogTap::default();
        let tap = log.clone();
        std::thread::spawn(move || {
            let mut pid = None;
            // The last lines: where etcd says why it exits (a port taken,
            // which `on_free_ports` retries), after its long start-up log.
            let mut tail = std::collections::VecDeque::new();
            for line in stderr.lines().map_while(Result::ok) {
                if let Some(p) = line.strip_prefix("pid ") {
                    pid = p.trim().parse::<u32>().ok();
                } else if line.contains("serving client traffic")
                    || line.contains("ready to serve client requests")
                {
                    let _ = tx.send(Ok(pid.unwrap_or_default()));
                } else {
                    tap.lock()
                        .unwrap()
                        .retain(|t: &mpsc::Sender<String>| t.send(line.clone()).is_ok());
                    if tail.len() == 50 {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
            }
            let _ = tx.send(Err(Vec::from(tail).join("\n")));
        });
        // The wrapper leaves the log pipe to etcd alone once it started
        // it, so an etcd that dies closes the pipe and ends the wait.
        let pid = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(pid)) => pid,
            Ok(Err(log)) => return Err(log),
            Err(_) => panic!("etcd did not report readiness within 60 s"),
        };
        let direct = match tls {
            Some(_) => curl,
            None => format!("127.0.0.1:{client}"),
        };
        // The relay speaks plain HTTP/2: servers with TLS answer directly.
        let relay = emulate::Version::from_env()
            .filter(|_| tls.is_none())
            .map(|version| emulate::Relay::start(&direct, version));
        Ok(Etcd {
            endpoint: relay
                .as_ref()
                .map_or_else(|| direct.clone(), |r| r.endpoint.clone()),
            direct,
            relay,
            pid,
            wrapper,
            log,
        })
    }

    /// A receiver of every log line etcd writes from now on.
    pub fn log_lines(&self) -> mpsc::Receiver<String> {
        let (tx, rx) = mpsc::channel();
        self.log.lock().unwrap().push(tx);
        rx
    }

    /// The relay in front of etcd, when the tests emulate a newer etcd.
    pub fn relay(&self) -> Option<&emulate::Relay> {
        self.relay.as_ref()
    }

    /// The etcd process id (for signals).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Kills etcd and waits for it to be gone.
    pub fn stop(&self) {
        self.wrapper.stop();
    }

    pub async fn client(&self) -> Client {
        Client::connect([&self.endpoint], None)
            .await
            .expect("connect to test etcd")
    }
}

/// One etcd per test binary, started on first use.
pub fn shared() -> &'static Etcd {
    static SHARED: OnceLock<Etcd> = OnceLock::new();
    SHARED.get_or_init(Etcd::start)
}

/// A key prefix no other test uses.
pub fn unique_prefix(test: &str) -> String {
    format!("/fairlock-test/{test}-{}/", uuid::Uuid::new_v4().simple())
}

/// Number of keys under `prefix`.
pub async fn count_keys(client: &mut Client, prefix: &str) -> i64 {
    client
        .get(
            prefix,
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .expect("count keys")
        .count()
}

/// Waits (on watch events, not on a clock) until at least `want` keys exist
/// under `prefix` (or at most, when `at_most`).
pub async fn wait_for_count(client: &mut Client, prefix: &str, want: i64, at_most: bool) {
    let opts = GetOptions::new().with_prefix().with_count_only();
    wait_until_counted(client, prefix, opts, |resp| resp.count(), want, at_most).await;
}

/// Waits (on watch events) until at least `want` calls have entries under
/// `prefix`: a read/write lock's or semaphore's call of several permits
/// has a key per permit (`<slot>-<i>-<n>`), counted once (by `i` = 0).
pub async fn wait_for_calls(client: &mut Client, prefix: &str, want: i64) {
    let opts = GetOptions::new().with_prefix().with_keys_only();
    let calls = |resp: &etcd_client::GetResponse| {
        let extra = |key: &[u8]| {
            let last = key.rsplit(|&b| b == b'/').next().unwrap_or_default();
            let parts: Vec<&[u8]> = last.split(|&b| b == b'-').collect();
            parts.len() == 3 && parts[1] != b"0"
        };
        resp.kvs().iter().filter(|kv| !extra(kv.key())).count() as i64
    };
    wait_until_counted(client, prefix, opts, calls, want, false).await;
}

async fn wait_until_counted(
    client: &mut Client,
    prefix: &str,
    opts: GetOptions,
    count: impl Fn(&etcd_client::GetResponse) -> i64,
    want: i64,
    at_most: bool,
) {
    let done = |n: i64| if at_most { n <= want } else { n >= want };
    let (count, done) = (&count, &done);
    let read = || {
        let (mut client, opts) = (client.clone(), opts.clone());
        async move {
            let resp = client.get(prefix, Some(opts)).await.expect("count keys");
            let rev = resp.header().expect("header").revision();
            (done(count(&resp)), rev)
        }
    };
    let never = || format!("keys under {prefix} never reached {want}");
    wait_on_prefix(client.clone(), prefix, read, never).await;
}

/// Waits (on watch events, not on a clock) until `read` answers `true`
/// with the revision it read at, reading again after each change under
/// `prefix`. One watch for the whole wait, opened after the first read: a
/// watch opened and dropped per change leaves etcd sending on reset
/// streams, and a burst of 1,000 made h2 close the connection (GOAWAY,
/// too many resets). Panics with `never()` after 120 s: a safety net
/// against a hang, not a timing assertion.
pub async fn wait_on_prefix<F: Future<Output = (bool, i64)>>(
    mut watcher: Client,
    prefix: &str,
    mut read: impl FnMut() -> F,
    never: impl FnOnce() -> String,
) {
    let wait = async {
        let mut stream = None;
        loop {
            let (done, rev) = read().await;
            if done {
                return;
            }
            if stream.is_none() {
                let watch = WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(rev + 1);
                stream = Some(watcher.watch(prefix, Some(watch)).await.expect("watch"));
            }
            let events = stream.as_mut().expect("opened above");
            // A change under the prefix: read again.
            while events
                .message()
                .await
                .expect("watch message")
                .expect("watch open")
                .events()
                .is_empty()
            {}
        }
    };
    tokio::time::timeout(Duration::from_secs(120), wait)
        .await
        .unwrap_or_else(|_| panic!("{}", never()));
}

/// An error with its sources, on one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
