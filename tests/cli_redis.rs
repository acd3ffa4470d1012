//! The `fairlock` command on Redis: `--endpoints redis://...` against real
//! redis-servers that the tests start (see tests/support).
#![cfg(all(feature = "cli", feature = "redis"))]

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{Context, Key, Locker};
use support::cli::{BIN, assert_no_overlap, run, spawn_holder, text};
use support::redis_server::{self as rs, wait_clean, wait_queued};

/// A `fairlock` command on `urls`, under its own prefix.
fn fairlock(urls: &[&str], prefix: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["--endpoints", &urls.join(","), "--prefix", prefix])
        .env_remove("FAIRLOCK_ENDPOINTS")
        .env_remove("FAIRLOCK_PREFIX")
        .env_remove("FAIRLOCK_TTL")
        // Each test's prefix is new: no wait before its first grant.
        .env("FAIRLOCK_DATA_LOSS_WAIT", "0");
    cmd
}

/// Concurrent `fairlock lock` processes on one Redis run a non-atomic
/// read-sleep-write on a shared file: no overlap, no lost update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commands_never_overlap_on_redis() {
    let url = rs::shared().url.as_str();
    for (processes, mode) in [(2, "--unfair"), (6, "--fair")] {
        let prefix = rs::unique_prefix("cli-mutex");
        assert_no_overlap(processes, mode, || fairlock(&[url], &prefix));
        wait_clean(url, &prefix).await;
    }
}

/// `fairlock status` on Redis shows the holder (token, TTL left) and the
/// queue in order; `--json` too; the waiter then runs after the holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_on_redis_shows_holder_and_queue() {
    let url = rs::shared().url.as_str();
    let prefix = rs::unique_prefix("cli-status");
    let (mut holder, first, _lines) = spawn_holder(fairlock(&[url], &prefix).arg("lock"), "k");
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
    // No lease on Redis; the node count of a single instance.
    assert!(
        json.contains("\"lease\":null,") && json.contains("\"nodes\":{\"holding\":1,\"total\":1}"),
        "{json}"
    );
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
    let config = RedisConfig::new([url])
        .with_prefix(prefix.clone())
        .with_data_loss_wait(Duration::ZERO);
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
        .with_data_loss_wait(Duration::ZERO)
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

/// A hash where the lock's string should be: `fairlock lock` fails at once
/// naming the key and the `redis-cli DEL` that removes it, `fairlock
/// status` flags it; once it is deleted the command runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_key_of_another_type_is_named_with_its_remedy() {
    let url = rs::shared().url.as_str();
    let prefix = rs::unique_prefix("cli-foreign");
    let lock_key = format!("{prefix}k");
    let mut conn = rs::conn(url).await;
    let () = redis::cmd("HSET")
        .arg(&lock_key)
        .arg("someone")
        .arg("else")
        .query_async::<i64>(&mut conn)
        .await
        .map(drop)
        .expect("hset");
    let remedy = format!("redis-cli DEL '{lock_key}'");
    let out = run(fairlock(&[url], &prefix).args(["lock", "--timeout", "60s", "k", "--", "true"]));
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&remedy) && err.contains("holds a value of another type"),
        "{err}"
    );
    let out = run(fairlock(&[url], &prefix).arg("status"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.contains(&remedy), "{table}");
    let () = redis::cmd("DEL")
        .arg(&lock_key)
        .query_async::<i64>(&mut conn)
        .await
        .map(drop)
        .expect("del");
    let out = run(fairlock(&[url], &prefix).args(["lock", "k", "--", "true"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_clean(url, &prefix).await;
}

/// `fairlock elect` on Redis runs the command while leading (term in its
/// environment) and `fairlock leader --json` shows the leader meanwhile
/// and nobody after; nothing is left. On Redlock both are refused with
/// exit 2, naming what to use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_and_leader_on_redis() {
    let url = rs::shared().url.as_str();
    let prefix = rs::unique_prefix("cli-elect");
    let mut leader = fairlock(&[url], &prefix)
        .args([
            "elect",
            "web",
            "10.0.0.7:80",
            "--",
            "sh",
            "-c",
            "echo LEADING $FAIRLOCK_TERM; read _",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        leader.stdout.take().expect("stdout"),
    ));
    let first = lines.next().expect("output").expect("line");
    let term: u64 = first
        .strip_prefix("LEADING ")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{first}"));
    let out = run(fairlock(&[url], &prefix).args(["leader", "web", "--json"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["leader"]["value"], "10.0.0.7:80");
    assert_eq!(json["leader"]["token"], term);
    writeln!(leader.stdin.as_mut().expect("stdin")).expect("end the command");
    assert!(leader.wait().expect("exit").success());
    let out = run(fairlock(&[url], &prefix).args(["leader", "web"]));
    assert_eq!(text(&out.stdout).trim(), "web: no leader");
    wait_clean(url, &prefix).await;
    let redlock = ["redis://127.0.0.1:1", "redis://127.0.0.1:2"];
    for args in [vec!["leader", "e"], vec!["elect", "e", "--", "true"]] {
        let out = run(fairlock(&redlock, &prefix).args(&args));
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("Redlock"),
            "{}",
            text(&out.stderr)
        );
    }
}
