//! The `fairlock` command on Redis: `--endpoints redis://...` against real
//! redis-servers that the tests start (see tests/support).
#![cfg(all(feature = "cli", feature = "redis"))]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{Context, Key, Locker};
use support::redis_server as rs;

const BIN: &str = env!("CARGO_BIN_EXE_fairlock");

/// A `fairlock` command on `urls`, under its own prefix.
fn fairlock(urls: &[&str], prefix: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["--endpoints", &urls.join(","), "--prefix", prefix])
        .env_remove("FAIRLOCK_ENDPOINTS")
        .env_remove("FAIRLOCK_PREFIX")
        .env_remove("FAIRLOCK_TTL");
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run fairlock")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn wait_queued(url: &str, prefix: &str, key: &str, n: usize) {
    let queue = format!("{prefix}{key}/_OWNERS_/queue");
    rs::wait_until(url, prefix, || async { rs::zcard(url, &queue).await >= n }).await;
}

async fn wait_clean(url: &str, prefix: &str) {
    rs::wait_until(url, prefix, || async {
        rs::keys_left(url, prefix).await.is_empty()
    })
    .await;
}

/// Concurrent `fairlock lock` processes on one Redis run a non-atomic
/// read-sleep-write on a shared file: no overlap, no lost update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commands_never_overlap_on_redis() {
    let url = rs::shared().url.as_str();
    for (processes, mode) in [(2, "--unfair"), (6, "--fair")] {
        let prefix = rs::unique_prefix("cli-mutex");
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("count"), "0").expect("init");
        let section = r#"mkdir "$D/inside" || echo overlap >> "$D/overlaps"
            n=$(cat "$D/count"); sleep 0.05; echo $((n + 1)) > "$D/count"
            rmdir "$D/inside""#;
        let children: Vec<Child> = (0..processes)
            .map(|_| {
                fairlock(&[url], &prefix)
                    .args(["lock", mode, "counter", "--", "sh", "-c", section])
                    .env("D", dir.path())
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        for mut c in children {
            assert!(c.wait().expect("wait").success());
        }
        let count = std::fs::read_to_string(dir.path().join("count")).expect("count");
        assert_eq!(count.trim(), processes.to_string(), "lost updates ({mode})");
        assert!(
            !dir.path().join("overlaps").exists(),
            "critical sections overlapped"
        );
        wait_clean(url, &prefix).await;
    }
}

/// `fairlock status` on Redis shows the holder (token, TTL left) and the
/// queue in order; `--json` too; the waiter then runs after the holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_on_redis_shows_holder_and_queue() {
    let url = rs::shared().url.as_str();
    let prefix = rs::unique_prefix("cli-status");
    let mut holder = fairlock(&[url], &prefix)
        .args([
            "lock",
            "k",
            "--",
            "sh",
            "-c",
            "echo HOLDING $FAIRLOCK_TOKEN; read _",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    let mut lines = BufReader::new(holder.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("holder output").expect("line");
    let token = first
        .strip_prefix("HOLDING ")
        .expect("holding line")
        .to_owned();
    let mut waiter = fairlock(&[url], &prefix)
        .args(["lock", "k", "--", "true"])
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn waiter");
    wait_queued(url, &prefix, "k", 1).await;
    let out = run(fairlock(&[url], &prefix).arg("status"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.contains("k: held by ") && table.contains(&format!("fencing token {token}")),
        "{table}"
    );
    assert!(table.contains("expires in"), "{table}");
    assert!(
        table.contains("  1. ") && table.contains("(fair)"),
        "{table}"
    );
    let out = run(fairlock(&[url], &prefix).args(["status", "k", "--json"]));
    let json = text(&out.stdout);
    assert!(
        json.contains(&format!("\"fencing_token\":{token}")),
        "{json}"
    );
    assert!(json.contains("\"ttl_left_ms\":"), "{json}");
    writeln!(holder.stdin.as_mut().expect("stdin")).expect("release holder");
    assert!(holder.wait().expect("holder").success());
    assert!(waiter.wait().expect("waiter").success());
    wait_clean(url, &prefix).await;
    let out = run(fairlock(&[url], &prefix).arg("status"));
    assert!(
        text(&out.stdout).contains("no locks"),
        "{}",
        text(&out.stdout)
    );
}

/// On Redlock (several redis:// URLs) unfair commands run; fair mode is
/// refused as a usage error naming the alternatives; mixed endpoints too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_runs_unfair_and_refuses_fair() {
    let servers = rs::shared_five();
    let urls: Vec<&str> = servers.iter().map(|s| s.url.as_str()).collect();
    let prefix = rs::unique_prefix("cli-redlock");
    let out = run(fairlock(&urls, &prefix).args([
        "lock",
        "--unfair",
        "k",
        "--",
        "sh",
        "-c",
        "echo $FAIRLOCK_TOKEN",
    ]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).trim().parse::<u64>().is_ok_and(|t| t > 0));
    let out = run(fairlock(&urls, &prefix).args(["lock", "k", "--", "true"]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("fair mode on Redlock"),
        "{}",
        text(&out.stderr)
    );
    let out = run(fairlock(&[urls[0], "127.0.0.1:2379"], &prefix).args(["status"]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("mix"), "{}", text(&out.stderr));
    for url in &urls {
        wait_clean(url, &prefix).await;
    }
}

/// A waiter process killed (-9) while queued leaves no queue behind once
/// the holder is gone: its record expires and the queue with it, although
/// the release passed its dead entry by (an unfair waiter stays queued
/// until it takes the lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_waiter_leaves_no_queue_behind() {
    let url = rs::shared().url.as_str();
    let prefix = rs::unique_prefix("cli-killed");
    let config = RedisConfig::new([url]).with_prefix(prefix.clone());
    let holder = RedisLocker::connect(config, false).await.expect("connect");
    let guard = holder
        .try_lock(&Key::from("k"))
        .await
        .expect("try_lock")
        .expect("free");
    let mut waiter = fairlock(&[url], &prefix)
        .args(["lock", "--unfair", "k", "--", "true"])
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn waiter");
    wait_queued(url, &prefix, "k", 1).await;
    waiter.kill().expect("kill -9");
    waiter.wait().expect("reap");
    guard.unlock().await.expect("unlock");
    wait_clean(url, &prefix).await;
}

/// A fair handoff to a waiter process that was killed (-9) just before the
/// release holds the lock only for the short life of a waiter record: the
/// next waiter gets it well within its context, which is shorter than the
/// lock's TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_to_a_killed_waiter_does_not_stall_a_ttl() {
    let url = rs::shared().url.as_str();
    let prefix = rs::unique_prefix("cli-handoff");
    let ttl = Duration::from_secs(60);
    let config = RedisConfig::new([url])
        .with_prefix(prefix.clone())
        .with_ttl(ttl);
    let base = RedisLocker::connect(config, true).await.expect("connect");
    let key = Key::from("k");
    let guard = base.try_lock(&key).await.expect("try_lock").expect("free");
    let mut dead = fairlock(&[url], &prefix)
        .args(["lock", "--ttl", "60s", "k", "--", "true"])
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn waiter");
    wait_queued(url, &prefix, "k", 1).await;
    let next = {
        let (locker, key) = (base.locker(true), key.clone());
        // Half the TTL: a handoff that stalls for a TTL times this out.
        let ctx = Context::background().with_timeout(ttl / 2);
        tokio::spawn(async move { locker.lock(&ctx, &key).await })
    };
    wait_queued(url, &prefix, "k", 2).await;
    dead.kill().expect("kill -9");
    dead.wait().expect("reap");
    let first = guard.fencing_token();
    guard.unlock().await.expect("unlock");
    let got = next.await.expect("task").expect("the next waiter's lock");
    // Handed to the dead waiter first (one grant), then to the next.
    assert!(got.fencing_token() > first);
    got.unlock().await.expect("unlock");
    wait_clean(url, &prefix).await;
}
