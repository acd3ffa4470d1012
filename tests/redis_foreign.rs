//! Keys of a Redis lock that someone else overwrites while fairlock uses
//! them, on one instance and on Redlock: each case, step by step (the
//! random cases are in tests/redis_hostile.rs).
#![cfg(feature = "redis")]

mod support;

use std::future::Future;
use std::time::Duration;

use fairlock::conformance::patient;
use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{Context, Key, Locker};
use support::redis_server::{self as rs, conn};

/// Runs `f` under a hang guard (a safety net, not a timing assertion).
async fn guarded<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 60 s (a hang)"))
}

/// Runs `cmds` on every server.
async fn run_on_all(urls: &[String], cmds: &[redis::Cmd]) {
    for url in urls {
        let mut c = conn(url).await;
        for cmd in cmds {
            let _: redis::Value = cmd.query_async(&mut c).await.expect("write");
        }
    }
}

/// `key` locks and unlocks normally, and nothing is left behind.
async fn works_again(locker: &RedisLocker, urls: &[String], prefix: &str, key: &Key) {
    let guard = guarded("lock", locker.lock(&patient(), key))
        .await
        .expect("lock");
    guarded("unlock", guard.unlock()).await.expect("unlock");
    for url in urls {
        guarded("clean", rs::wait_clean(url, prefix)).await;
    }
}

/// A waiter whose queue someone overwrites with a string: its next round
/// fails at once with an error naming the queue key and the command that
/// removes it (not a wait until its deadline); the holder still unlocks,
/// and once the string is gone the waiter's key works again.
async fn queue_overwritten_under_a_waiter(urls: Vec<String>) {
    let prefix = rs::unique_prefix("overwritten");
    let config = RedisConfig::new(urls.clone())
        .with_prefix(prefix.clone())
        .with_ttl(Duration::from_secs(60));
    let holder = RedisLocker::connect(config.clone(), false)
        .await
        .expect("connect");
    let waiter = holder.locker(false);
    let key = Key::from("q");
    let queue = rs::queue_key(&prefix, &key);
    let guard = holder
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("free");
    let k = key.clone();
    // Far longer than the waiter's polls (a second), far shorter than the
    // TTL for which failed rounds used to be retried.
    let deadline = Context::background().with_timeout(Duration::from_secs(20));
    let waiting = tokio::spawn(async move { waiter.lock(&deadline, &k).await.map(drop) });
    for url in &urls {
        guarded("queued", rs::wait_queued(url, &prefix, &key, 1)).await;
    }
    let overwrite = [
        redis::cmd("DEL").arg(&queue).to_owned(),
        redis::cmd("SET")
            .arg(&queue)
            .arg("someone else's")
            .to_owned(),
    ];
    run_on_all(&urls, &overwrite).await;
    let err = guarded("waiter", waiting)
        .await
        .expect("join")
        .expect_err("the queue is a string");
    let text = format!("{err:?}");
    assert!(
        text.contains(&format!("redis-cli DEL '{queue}'"))
            && text.contains("holds a string, where fairlock keeps the queue of waiters"),
        "{text}"
    );
    guarded("unlock", guard.unlock()).await.expect("unlock");
    run_on_all(&urls, &[redis::cmd("DEL").arg(&queue).to_owned()]).await;
    works_again(&holder, &urls, &prefix, &key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_fails_at_once_naming_a_queue_overwritten_on_one_instance() {
    queue_overwritten_under_a_waiter(vec![rs::shared().url.clone()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_fails_at_once_naming_a_queue_overwritten_on_redlock() {
    let urls = rs::shared_five().iter().map(|s| s.url.clone()).collect();
    queue_overwritten_under_a_waiter(urls).await;
}
