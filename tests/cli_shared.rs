//! `fairlock lock --read`, `--write` and `--limit N`: read/write locks and
//! semaphores from the command, and `fairlock status` of them, against a
//! real etcd the tests start (see tests/support).
#![cfg(feature = "cli")]

mod support;

use std::io::Write;
use std::process::Child;

use support::cli::{fairlock, run, spawn_holder, text};

/// A holder of `key` with `extra` options, whose command waits for a line
/// on stdin.
fn hold(prefix: &str, key: &str, extra: &[&str]) -> Child {
    let (child, first, _) = spawn_holder(fairlock(prefix).arg("lock").args(extra), key);
    assert!(first.starts_with("HOLDING "), "{first}");
    child
}

fn finish(mut holder: Child) {
    writeln!(holder.stdin.as_mut().expect("stdin")).expect("release holder");
    assert!(holder.wait().expect("holder exit").success());
}

/// `true` exit of `fairlock lock <extra> --nonblock KEY -- true`.
fn nonblock(prefix: &str, key: &str, extra: &[&str]) -> Option<i32> {
    let out = run(fairlock(prefix)
        .arg("lock")
        .args(extra)
        .args(["--nonblock", key, "--", "true"]));
    out.status.code()
}

#[test]
fn a_semaphore_runs_up_to_its_limit() {
    let prefix = support::unique_prefix("cli-sem");
    let (one, two) = (
        hold(&prefix, "jobs", &["--limit", "2"]),
        hold(&prefix, "jobs", &["--limit", "2"]),
    );
    assert_eq!(
        nonblock(&prefix, "jobs", &["--limit", "2"]),
        Some(75),
        "a third permit of two"
    );
    let status = run(fairlock(&prefix).args(["status", "jobs"]));
    let shown = text(&status.stdout);
    assert!(
        shown.contains("jobs (semaphore of 2): 2 holding"),
        "{shown}"
    );
    assert!(
        !shown.contains("etcdctl del"),
        "listed as someone else's: {shown}"
    );
    finish(one);
    assert_eq!(
        nonblock(&prefix, "jobs", &["--limit", "2"]),
        Some(0),
        "a permit is free"
    );
    finish(two);
}

#[test]
fn readers_share_and_a_writer_waits() {
    let prefix = support::unique_prefix("cli-rw");
    let reader = hold(&prefix, "catalog", &["--read"]);
    assert_eq!(
        nonblock(&prefix, "catalog", &["--read"]),
        Some(0),
        "readers share"
    );
    assert_eq!(
        nonblock(&prefix, "catalog", &["--shared"]),
        Some(0),
        "--shared is --read"
    );
    assert_eq!(
        nonblock(&prefix, "catalog", &["--write"]),
        Some(75),
        "a writer waits"
    );
    finish(reader);
    assert_eq!(nonblock(&prefix, "catalog", &["--write"]), Some(0));
}

#[test]
fn conflicting_options_are_a_usage_error() {
    let prefix = support::unique_prefix("cli-rw-bad");
    for extra in [
        &["--read", "--write"][..],
        &["--read", "--limit", "2"],
        &["--unfair", "--write"],
        &["--permits", "1"],
        &["--limit", "2", "--permits", "3"],
        &["--limit", "2", "--permits", "2"],
    ] {
        let out = run(fairlock(&prefix)
            .arg("lock")
            .args(extra)
            .args(["k", "--", "true"]));
        assert_eq!(
            out.status.code(),
            Some(2),
            "{extra:?}: {}",
            text(&out.stderr)
        );
    }
    let out = run(fairlock(&prefix).args(["lock", "--limit", "0", "k", "--", "true"]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--limit"),
        "{}",
        text(&out.stderr)
    );
}
