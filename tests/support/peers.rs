//! etcd's own peers for the mixed-fleet tests of etcd's layout
//! (tests/etcd_layout.rs): `etcdctl lock` (Debian's etcd-client) and Go's
//! `concurrency.Mutex` (examples/recipe-go, built offline from Debian's Go
//! toolchain and etcd 3.4 source by scripts/build-example-go.sh).
//!
//! Each peer is a child process whose stdout lines a thread passes on, so
//! a test waits for a line (an event) with a long guard deadline rather
//! than a sleep. Dropping a peer kills it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::sync::mpsc;

/// How long a test waits for a peer's line before it fails.
const GUARD: Duration = Duration::from_secs(120);

/// A peer process and its stdout, line by line.
pub struct Peer {
    pub what: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Peer {
    fn spawn(what: String, cmd: &mut Command) -> Peer {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Peer {
            what,
            child,
            stdin,
            lines,
        }
    }

    /// `etcdctl lock NAME` against `endpoint`: it prints its key (`NAME/<lease
    /// hex>`) once it holds, and releases on SIGTERM ([`Peer::terminate`]).
    pub fn etcdctl_lock(endpoint: &str, name: &str) -> Peer {
        Peer::spawn(
            format!("etcdctl lock {name}"),
            Command::new("etcdctl").env("ETCDCTL_API", "3").args([
                "--endpoints",
                endpoint,
                "lock",
                name,
            ]),
        )
    }

    /// `etcdctl lock NAME -- sh -c SCRIPT` with `env` set for the script:
    /// runs it while holding, then releases and exits.
    pub fn etcdctl_lock_run(endpoint: &str, name: &str, script: &str, env: (&str, &str)) -> Peer {
        Peer::spawn(
            format!("etcdctl lock {name} -- sh"),
            Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .env(env.0, env.1)
                .args([
                    "--endpoints",
                    endpoint,
                    "lock",
                    name,
                    "--",
                    "sh",
                    "-c",
                    script,
                ]),
        )
    }

    /// Go's `concurrency.Mutex` on `name` (examples/recipe-go): prints
    /// `SESSION <lease hex>`, then `HOLDING <key> <rev>` once it holds;
    /// the stdin line `release` unlocks.
    pub fn go_mutex(endpoint: &str, name: &str) -> Peer {
        Peer::spawn(
            format!("Go Mutex {name}"),
            Command::new(recipe_go()).args(["-endpoint", endpoint, "mutex", name]),
        )
    }

    /// `etcdctl elect NAME VALUE`: prints its key, then VALUE, once
    /// elected; resigns on SIGTERM.
    pub fn etcdctl_elect(endpoint: &str, name: &str, value: &str) -> Peer {
        Peer::spawn(
            format!("etcdctl elect {name}"),
            Command::new("etcdctl").env("ETCDCTL_API", "3").args([
                "--endpoints",
                endpoint,
                "elect",
                name,
                value,
            ]),
        )
    }

    /// `etcdctl elect -l NAME`: prints the leader's key, then its value,
    /// for the leader now and every change Go's `Observe` reports.
    pub fn etcdctl_observe(endpoint: &str, name: &str) -> Peer {
        Peer::spawn(
            format!("etcdctl elect -l {name}"),
            Command::new("etcdctl").env("ETCDCTL_API", "3").args([
                "--endpoints",
                endpoint,
                "elect",
                "-l",
                name,
            ]),
        )
    }

    /// Go's `concurrency.Election` campaigning on `name` with `value`
    /// (examples/recipe-go): `SESSION <lease hex>`, then `LEADER <key>
    /// <rev> <value>` once elected; stdin `proclaim V`, `resign`.
    pub fn go_elect(endpoint: &str, name: &str, value: &str) -> Peer {
        Peer::spawn(
            format!("Go Election {name}"),
            Command::new(recipe_go()).args(["-endpoint", endpoint, "elect", name, value]),
        )
    }

    /// Go's `Election.Observe` on `name`: `SESSION <lease hex>`, then
    /// `SEEN <key> <rev> <value>` per leader or proclaim.
    pub fn go_observe(endpoint: &str, name: &str) -> Peer {
        Peer::spawn(
            format!("Go Observe {name}"),
            Command::new(recipe_go()).args(["-endpoint", endpoint, "observe", name]),
        )
    }

    /// The next line the peer prints; panics when it exits first or after
    /// a long guard deadline.
    pub async fn line(&mut self) -> String {
        match tokio::time::timeout(GUARD, self.lines.recv()).await {
            Ok(Some(line)) => line,
            Ok(None) => panic!("{} exited: {:?}", self.what, self.child.try_wait()),
            Err(_) => panic!("{} printed nothing for {GUARD:?}", self.what),
        }
    }

    /// A line the peer printed already, if any (no wait).
    pub fn printed(&mut self) -> Option<String> {
        self.lines.try_recv().ok()
    }

    /// Sends `line` to the peer's stdin.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("write to the peer");
        stdin.flush().expect("flush");
    }

    /// Stops the peer with SIGTERM (`etcdctl lock` then releases) and
    /// waits for it to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        super::signal(self.child.id(), "-TERM");
        self.child.wait().expect("wait")
    }

    /// Waits for the peer to exit.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.stdin.take();
        self.child.wait().expect("wait")
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The recipe-go binary, built once per test binary.
pub fn recipe_go() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| {
        let root = env!("CARGO_MANIFEST_DIR");
        let out = Command::new("bash")
            .arg(format!("{root}/scripts/build-example-go.sh"))
            .arg("recipe-go")
            .output()
            .expect("run scripts/build-example-go.sh");
        assert!(
            out.status.success(),
            "building examples/recipe-go failed (needs golang-go and golang-etcd-server-dev): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        stdout.lines().last().expect("the binary's path").to_owned()
    })
}
