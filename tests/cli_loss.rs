//! A `fairlock lock` whose lock is lost while its command runs: the
//! command gets SIGTERM, `fairlock` exits 76 and names the cause. The built
//! binary against a real etcd that the tests start (see tests/support).
#![cfg(feature = "cli")]

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Output, Stdio};

use support::cli::{fairlock, run, text};
use support::signal;

fn stderr(out: &Output) -> String {
    text(&out.stderr)
}

async fn wait_clean(prefix: &str) {
    let mut client = support::shared().client().await;
    support::wait_for_count(&mut client, prefix, 0, true).await;
}

/// `fairlock lock <extra> k` running a command that loops until SIGTERM
/// (then prints TERMINATED); returns once the command has started, with
/// the rest of its output.
fn run_until_terminated(
    prefix: &str,
    extra: &[&str],
) -> (Child, std::io::Lines<BufReader<std::process::ChildStdout>>) {
    let mut holder = fairlock(prefix)
        .arg("lock")
        .args(extra)
        .args(["k", "--", "sh", "-c"])
        .arg("trap 'echo TERMINATED; exit 0' TERM; echo STARTED; while :; do sleep 0.05; done")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(holder.stdout.take().expect("stdout")).lines();
    assert_eq!(lines.next().expect("line").expect("read"), "STARTED");
    (holder, lines)
}

/// A SIGSTOPped `fairlock` whose lease expires finds on SIGCONT that its
/// lock was lost: its command gets SIGTERM and it exits with code 76.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_terminates_its_command() {
    let prefix = support::unique_prefix("cli-pause");
    let (holder, mut lines) = run_until_terminated(&prefix, &["--ttl", "2s"]);
    signal(holder.id(), "-STOP");
    // Another process gets the lock: the paused holder's lease expired.
    let out = run(fairlock(&prefix).args(["lock", "k", "--", "true"]));
    assert!(out.status.success(), "{}", stderr(&out));
    signal(holder.id(), "-CONT");
    assert_eq!(lines.next().expect("line").expect("read"), "TERMINATED");
    let out = holder.wait_with_output().expect("exit");
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("was lost"), "{err}");
    // Paused past its TTL: the cause is the lease, however it was learnt.
    assert!(err.contains("lease"), "{err}");
    wait_clean(&prefix).await;
}

/// A holder whose lock key someone else deletes is told so: its command
/// gets SIGTERM, it exits 76, and the message names the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_lock_key_is_named_as_the_cause() {
    let prefix = support::unique_prefix("cli-deleted");
    let (holder, _lines) = run_until_terminated(&prefix, &[]);
    let mut client = support::shared().client().await;
    client
        .delete(format!("{prefix}k"), None)
        .await
        .expect("delete the lock key");
    let out = holder.wait_with_output().expect("exit");
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("deleted or taken over by someone else"),
        "{err}"
    );
    wait_clean(&prefix).await;
}
