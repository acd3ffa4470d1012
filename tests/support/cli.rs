//! Test support: the built `fairlock` binary, driven as a user would
//! (tests/cli.rs on etcd, tests/cli_redis.rs on Redis).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Output, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_fairlock");

/// A `fairlock` command on the shared test etcd, under its own prefix.
pub fn fairlock(prefix: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("FAIRLOCK_ENDPOINTS", &super::shared().endpoint)
        .env("FAIRLOCK_PREFIX", prefix)
        .env_remove("FAIRLOCK_TTL")
        .env_remove("FAIRLOCK_CONNECT_TIMEOUT");
    cmd
}

/// Runs `cmd` with no stdin and collects its output.
pub fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run fairlock")
}

/// Process output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Starts `processes` commands at once, each `fairlock(), then lock <mode>
/// counter -- sh -c ...` running [`super::SECTION`], and asserts that all
/// succeeded, none overlapped and no update was lost.
pub fn assert_no_overlap(processes: usize, mode: &str, fairlock: impl Fn() -> Command) {
    assert_sections_never_overlap(mode, processes, |_| {
        let mut cmd = fairlock();
        cmd.args(["lock", mode, "counter"]);
        cmd
    });
}

/// Starts `processes` lock commands at once, `lock(i)` each (a command
/// that runs what follows its `--` under a lock), running
/// [`super::SECTION`], and asserts that all succeeded, none overlapped and
/// no update was lost (`what` names them in the failure).
pub fn assert_sections_never_overlap(
    what: &str,
    processes: usize,
    lock: impl Fn(usize) -> Command,
) {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("count"), "0").expect("init");
    let children: Vec<Child> = (0..processes)
        .map(|i| {
            lock(i)
                .args(["--", "sh", "-c", super::SECTION])
                .env("D", dir.path())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for mut c in children {
        assert!(c.wait().expect("wait").success());
    }
    let count = std::fs::read_to_string(dir.path().join("count")).expect("count");
    assert_eq!(count.trim(), processes.to_string(), "lost updates ({what})");
    assert!(
        !dir.path().join("overlaps").exists(),
        "critical sections overlapped"
    );
}

/// Spawns `cmd` (`fairlock ... lock [options]`) on `key` with a command
/// that prints `HOLDING <token>` and then waits for a line on stdin;
/// returns the process, the first line it printed and the rest of its
/// output.
pub fn spawn_holder(
    cmd: &mut Command,
    key: &str,
) -> (Child, String, std::io::Lines<BufReader<ChildStdout>>) {
    let mut child = cmd
        .args([
            key,
            "--",
            "sh",
            "-c",
            "echo HOLDING $FAIRLOCK_TOKEN; read _",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("holder output").expect("line");
    (child, first, lines)
}
