//! Test support: real redis-server processes on free loopback ports.
//!
//! The binary comes from `REDIS_BIN` or PATH. Each server runs under a
//! small shell wrapper that kills it and removes its directory as soon as
//! the test process exits (the wrapper reads our end of a pipe until EOF),
//! so no server outlives the tests even when one fails. Servers run with
//! `--save "" --appendonly no` and keyspace notifications on, which the
//! helpers below wait on (events, not sleeps).
#![allow(dead_code)]

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{OnceLock, mpsc};
use std::time::Duration;

use futures_util::StreamExt;

use super::Wrapper;

/// A running redis-server.
pub struct RedisServer {
    pub url: String,
    pub port: u16,
    pid: u32,
    wrapper: Wrapper,
}

fn redis_bin() -> String {
    super::server_bin("REDIS_BIN", "redis-server", "redis-server", "redis-server")
}

impl RedisServer {
    /// Starts a fresh redis-server and waits until it accepts connections.
    pub fn start() -> RedisServer {
        RedisServer::start_with(None)
    }

    /// Starts a fresh redis-server that serves TLS only (`--port 0
    /// --tls-port P`) with `server` (certificate, key), trusting `ca` for
    /// client certificates (which it demands unless `extra` says
    /// `--tls-auth-clients no`); its URL is `rediss://127.0.0.1:P`.
    pub fn start_tls(server: (&Path, &Path), ca: &Path, extra: &[&str]) -> RedisServer {
        let mut args: Vec<OsString> = vec!["--tls-cert-file".into(), server.0.into()];
        args.extend(["--tls-key-file".into(), server.1.into()]);
        args.extend(["--tls-ca-cert-file".into(), ca.into()]);
        args.extend(extra.iter().map(OsString::from));
        RedisServer::start_with(Some(args))
    }

    fn start_with(tls: Option<Vec<OsString>>) -> RedisServer {
        RedisServer::start_spec(&Spec {
            tls,
            ..Spec::default()
        })
    }

    /// Starts a server as `spec` says (see [`Spec`]).
    pub fn start_spec(spec: &Spec) -> RedisServer {
        super::on_free_ports(|| RedisServer::try_start(spec))
            .unwrap_or_else(|log| panic!("redis-server exited before it was ready:\n{log}"))
    }

    /// Starts a server; `Err` holds its log when it exits before it is
    /// ready.
    fn try_start(spec: &Spec) -> Result<RedisServer, String> {
        let tls = spec.tls.as_deref();
        let bin = redis_bin();
        let port = super::free_port();
        let (scheme, port_args): (&str, Vec<OsString>) = match tls {
            Some(extra) => {
                let mut a: Vec<OsString> = vec!["--port".into(), "0".into()];
                a.extend(["--tls-port".into(), port.to_string().into()]);
                a.extend(extra.iter().cloned());
                ("rediss", a)
            }
            None => ("redis", vec!["--port".into(), port.to_string().into()]),
        };
        let dir = tempfile::Builder::new()
            .prefix("fairlock-test-redis-")
            .tempdir()
            .expect("temp dir")
            .keep();
        let script = r#"
            "$REDIS" "$@" & pid=$!
            echo "pid $pid" >&2
            exec >/dev/null 2>/dev/null
            read -r _ || true
            kill -CONT "$pid" 2>/dev/null; kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
            rm -rf "$DATA"
        "#;
        let first = spec
            .first
            .as_ref()
            .map(|f| f(&dir, port))
            .unwrap_or_default();
        let mut child = Command::new("bash")
            .arg("-c")
            .arg(script)
            .arg("redis-wrapper")
            .args(&first)
            .args(&port_args)
            .args(&spec.extra)
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(&dir)
            .args(["--notify-keyspace-events", "KA", "--logfile", ""])
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .env("REDIS", &bin)
            .env("DATA", &dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn redis wrapper");
        let stdin = child.stdin.take().expect("wrapper stdin");
        let stdout = BufReader::new(child.stdout.take().expect("wrapper stdout"));
        let stderr = BufReader::new(child.stderr.take().expect("wrapper stderr"));
        // Dropped on an early return: kills the server and removes its dir.
        let wrapper = Wrapper::new(child, stdin);
        let (tx, rx) = mpsc::channel();
        let pid_tx = tx.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if let Some(p) = line.strip_prefix("pid ") {
                    let _ = pid_tx.send(Ok(Some(p.trim().parse::<u32>().unwrap_or_default())));
                }
            }
        });
        // Read the log until it accepts connections; keep draining it.
        let ready = spec.ready;
        std::thread::spawn(move || {
            // The last lines: where the server says why it exits.
            let mut tail = std::collections::VecDeque::new();
            for line in stdout.lines().map_while(Result::ok) {
                if line.contains(ready) {
                    let _ = tx.send(Ok(None));
                } else {
                    if tail.len() == 50 {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
            }
            let _ = tx.send(Err(Vec::from(tail).join("\n")));
        });
        // The wrapper leaves the output pipes to the server alone once it
        // started it, so a server that dies closes them and ends the wait.
        let (mut pid, mut ready) = (None, false);
        while pid.is_none() || !ready {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(Ok(Some(p))) => pid = Some(p),
                Ok(Ok(None)) => ready = true,
                Ok(Err(log)) => return Err(log),
                Err(_) => panic!("redis-server did not report readiness within 60 s"),
            }
        }
        Ok(RedisServer {
            url: format!("{scheme}://127.0.0.1:{port}"),
            port,
            pid: pid.unwrap_or_default(),
            wrapper,
        })
    }

    /// The redis-server process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends `sig` (e.g. "-STOP", "-CONT") to the server.
    pub fn signal(&self, sig: &str) {
        super::signal(self.pid, sig);
    }

    /// Kills the server (-9) and waits for it to be gone.
    pub fn stop(&self) {
        self.wrapper.stop();
    }

    pub fn client(&self) -> redis::Client {
        client_for(&self.url)
    }
}

/// Makes the arguments that go first from a server's directory and port.
pub type FirstArgs = Box<dyn Fn(&Path, u16) -> Vec<OsString>>;

/// How to start a server: [`Spec::default`] is a plain one.
pub struct Spec {
    /// TLS arguments (see [`RedisServer::start_tls`]).
    pub tls: Option<Vec<OsString>>,
    /// Arguments that go first, made from the server's own directory and
    /// port (a config file written there).
    pub first: Option<FirstArgs>,
    /// More arguments (`--cluster-enabled yes`, `--sentinel`, ...).
    pub extra: Vec<OsString>,
    /// The log line that says the server is ready.
    pub ready: &'static str,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec {
            tls: None,
            first: None,
            extra: Vec::new(),
            ready: "Ready to accept connections",
        }
    }
}

/// The client of the server binary in use (`redis-cli` beside
/// `redis-server`, `valkey-cli` beside `valkey-server`), or `REDIS_CLI_BIN`.
pub fn cli_bin() -> String {
    if let Ok(cli) = std::env::var("REDIS_CLI_BIN") {
        return cli;
    }
    let server = redis_bin();
    match server.strip_suffix("-server") {
        Some(head) => format!("{head}-cli"),
        None => "redis-cli".into(),
    }
}

/// Runs `f` to its end on a runtime of its own, on a thread of its own
/// (starting servers is synchronous, and may be called from async tests).
pub fn block_on<F: std::future::Future + Send>(f: F) -> F::Output
where
    F::Output: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime")
                    .block_on(f)
            })
            .join()
            .expect("block_on")
    })
}

/// Waits until a write on the node at `url`, if it is a master, is
/// acknowledged by a replica: a key (on a cluster one of the node's own
/// slots: the first `fairlock-ready:{n}` it does not redirect) is set,
/// waited for and deleted. A master streams writes to a replica only from
/// the replica's first acknowledgement after its sync (up to a second
/// after it), and grants wait for the replicas (`WAIT`).
pub async fn replicated(url: &str) {
    let mut c = conn(url).await;
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut c)
        .await
        .expect("info");
    if !info.contains("role:master") {
        return;
    }
    for n in 0.. {
        let key = format!("fairlock-ready:{{{n}}}");
        let set: redis::RedisResult<()> =
            redis::cmd("SET").arg(&key).arg(1).query_async(&mut c).await;
        if set.is_err() {
            continue; // MOVED: another master's slot
        }
        // WAIT blocks for at most 100 ms a call (within the connection's
        // response timeout), for at most two minutes in all.
        let acked = async {
            loop {
                let acked: i64 = redis::cmd("WAIT")
                    .arg(1)
                    .arg(100)
                    .query_async(&mut c)
                    .await
                    .expect("wait");
                if acked >= 1 {
                    return;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(120), acked)
            .await
            .unwrap_or_else(|_| panic!("the replica of {url} never acknowledged a write"));
        let () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut c)
            .await
            .expect("del");
        return;
    }
}

/// One redis-server per test binary, started on first use.
pub fn shared() -> &'static RedisServer {
    static SHARED: OnceLock<RedisServer> = OnceLock::new();
    SHARED.get_or_init(RedisServer::start)
}

/// Five redis-servers per test binary (Redlock), started on first use.
pub fn shared_five() -> &'static [RedisServer] {
    static SHARED: OnceLock<Vec<RedisServer>> = OnceLock::new();
    SHARED.get_or_init(|| start_many(5))
}

/// `n` fresh servers, started in parallel.
pub fn start_many(n: usize) -> Vec<RedisServer> {
    let handles: Vec<_> = (0..n)
        .map(|_| std::thread::spawn(RedisServer::start))
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("start redis"))
        .collect()
}

/// A client for `url`; `rediss://` URLs trust the test CA and present the
/// test client certificate (tests/support/tls.rs).
pub fn client_for(url: &str) -> redis::Client {
    if !url.starts_with("rediss://") {
        return redis::Client::open(url).expect("redis url");
    }
    let c = super::tls::certs();
    let (cert, key) = c.client();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs = redis::TlsCertificates {
        client_tls: Some(redis::ClientTlsConfig {
            client_cert: std::fs::read(cert).expect("client cert"),
            client_key: std::fs::read(key).expect("client key"),
        }),
        root_cert: Some(std::fs::read(c.ca()).expect("ca")),
    };
    redis::Client::build_with_tls(url, certs).expect("rediss url")
}

/// A new connection to the server at `url`. Its answers may take up to
/// 30 s: the client's default bound (0.5 s) is shorter than what some
/// administrative commands take on a loaded machine (Valkey 8's `CLUSTER
/// SETSLOT` waits for the replicas to acknowledge).
pub async fn conn(url: &str) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(std::time::Duration::from_secs(30)));
    client_for(url)
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("connect")
}

/// A key prefix no other test uses.
pub fn unique_prefix(test: &str) -> String {
    format!("fairlock-test:{test}-{}:", uuid::Uuid::new_v4().simple())
}

/// The keys under `prefix` on the server at `url`, except the fencing
/// counters and epochs (which outlive every lock by design: the prefix's
/// counter and epoch, and on a cluster a counter per lock,
/// `<prefix>{<key>}/_OWNERS_/fence`, and an epoch per hash slot,
/// `<prefix>_OWNERS_/epoch/{<n>}`).
pub async fn keys_left(url: &str, prefix: &str) -> Vec<String> {
    let mut conn = conn(url).await;
    let fence = format!("{prefix}_OWNERS_/fence");
    let epoch = format!("{prefix}_OWNERS_/epoch");
    let is_fence = |k: &String| {
        *k == fence
            || (k.starts_with(&format!("{prefix}{{")) && k.ends_with("}/_OWNERS_/fence"))
            || *k == epoch
            || (k.starts_with(&format!("{epoch}/{{")) && k.ends_with('}'))
    };
    let mut left = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let (next, keys): (String, Vec<String>) = redis::cmd("SCAN")
            .arg(&cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .expect("scan");
        left.extend(keys.into_iter().filter(|k| !is_fence(k)));
        if next == "0" {
            return left;
        }
        cursor = next;
    }
}

/// Number of members of the sorted set `key`.
pub async fn zcard(url: &str, key: &str) -> usize {
    redis::cmd("ZCARD")
        .arg(key)
        .query_async(&mut conn(url).await)
        .await
        .expect("zcard")
}

/// The Redis key of the fair queue of `key` under `prefix`.
pub fn queue_key(prefix: &str, key: impl std::fmt::Display) -> String {
    format!("{prefix}{key}/_OWNERS_/queue")
}

/// Waits (on keyspace events) until at least `n` waiters are queued on
/// `key` under `prefix` on the server at `url`.
pub async fn wait_queued(url: &str, prefix: &str, key: impl std::fmt::Display, n: usize) {
    let queue = queue_key(prefix, key);
    wait_until(url, prefix, || async { zcard(url, &queue).await >= n }).await;
}

/// Waits (on keyspace events) until no key is left under `prefix` on the
/// server at `url` (but the fencing counter).
pub async fn wait_clean(url: &str, prefix: &str) {
    wait_until(url, prefix, || async {
        keys_left(url, prefix).await.is_empty()
    })
    .await;
}

/// Waits until `done()` holds, re-checking on every keyspace event under
/// `prefix` on the server at `url` (the subscription is open before the
/// first check, so no change slips through). Guards against a hang only.
pub async fn wait_until<F, Fut>(url: &str, prefix: &str, done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    wait_until_any(std::slice::from_ref(&url.to_owned()), prefix, done).await;
}

/// [`wait_until`] with the keyspace events of every server at `urls` (the
/// masters of a cluster).
pub async fn wait_until_any<F, Fut>(urls: &[String], prefix: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut streams = Vec::new();
    for url in urls {
        let mut pubsub = client_for(url).get_async_pubsub().await.expect("pubsub");
        pubsub
            .psubscribe(format!("__keyspace@0__:{prefix}*"))
            .await
            .expect("psubscribe");
        streams.push(pubsub.into_on_message());
    }
    let mut events = futures_util::stream::select_all(streams);
    let wait = async {
        while !done().await {
            events.next().await.expect("keyspace events ended");
        }
    };
    tokio::time::timeout(Duration::from_secs(120), wait)
        .await
        .unwrap_or_else(|_| panic!("keys under {prefix} never reached the expected state"));
}

/// Bytes that clients sent to the server at `port` and that it has not read
/// yet (the receive queues of its established loopback connections, from
/// /proc/net/tcp): requests piling up while the server is stopped.
pub fn unread_request_bytes(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let local = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local address, remote address, state (01 = established),
            // tx_queue:rx_queue
            let (addr, state, queues) = (fields.get(1)?, fields.get(3)?, fields.get(4)?);
            if !addr.ends_with(&local) || *state != "01" {
                return None;
            }
            u64::from_str_radix(queues.split_once(':')?.1, 16).ok()
        })
        .sum()
}

/// Waits until requests of `n` times the size of the first one are queued
/// unread at the (stopped) server at `port`: the first one and its retries.
/// Polls the kernel's counters (a server that is stopped sends no events);
/// guards against a hang only.
pub async fn wait_unread_requests(port: u16, n: u64) {
    let wait = async {
        let mut first = 0;
        loop {
            let unread = unread_request_bytes(port);
            if first == 0 {
                first = unread;
            }
            if first > 0 && unread >= n * first {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(120), wait)
        .await
        .unwrap_or_else(|_| panic!("{n} requests never reached the server on port {port}"));
}
