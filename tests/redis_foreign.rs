//! Keys of a Redis lock that someone else overwrites while fairlock uses
//! them, on one instance and on Redlock: each case, step by step (the
//! random cases are in tests/redis_hostile.rs).
#![cfg(feature = "redis")]

mod support;

use std::future::Future;
use std::time::Duration;

use fairlock::conformance::patient;
use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{Context, Error, Key, Locker};
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
        .with_data_loss_wait(Duration::ZERO)
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
            && text.contains(
                "holds a value of another type, where fairlock keeps the queue of waiters"
            ),
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

/// The ids of the clients of the server at `url` that Redis holds blocked
/// on a script (`CLIENT PAUSE ... WRITE`), polled until there is one
/// (guarded against a hang only).
async fn paused_script_clients(url: &str) -> Vec<String> {
    let mut c = conn(url).await;
    guarded("a paused release", async {
        loop {
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut c)
                .await
                .expect("client list");
            let ids: Vec<String> = list
                .lines()
                .filter(|l| {
                    l.contains(" flags=b ")
                        && (l.contains(" cmd=evalsha ") || l.contains(" cmd=eval "))
                })
                .filter_map(|l| l.strip_prefix("id=")?.split(' ').next().map(str::to_owned))
                .collect();
            if !ids.is_empty() {
                return ids;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
}

/// A holder whose lock key someone overwrote, and whose first release
/// got no answer and was never applied (its connection was killed while
/// Redis held the request): the retry finds the other value, and unlock
/// says the lock was lost, not that it released it, and leaves the other
/// value alone. On `n` servers of their own (pausing writes would stall
/// other tests).
async fn unanswered_release_then_someone_elses_key(n: usize) {
    let servers = rs::start_many(n);
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let prefix = rs::unique_prefix("overwritten-release");
    // A long TTL: the watchdog's first extend (which would see the other
    // value) is due long after the test.
    let config = RedisConfig::new(urls.clone())
        .with_prefix(prefix.clone())
        .with_data_loss_wait(Duration::ZERO)
        .with_ttl(Duration::from_secs(60));
    let locker = RedisLocker::connect(config, false).await.expect("connect");
    let key = Key::from("r");
    let lock_key = format!("{prefix}r");
    let guard = locker
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("free");
    let other = "someone else's value";
    let client = |cmd: &str| redis::cmd("CLIENT").arg(cmd).to_owned();
    run_on_all(
        &urls,
        &[
            redis::cmd("SET").arg(&lock_key).arg(other).to_owned(),
            client("PAUSE").arg(60_000).arg("WRITE").to_owned(),
        ],
    )
    .await;
    let unlock = tokio::spawn(guard.unlock());
    for url in &urls {
        for id in paused_script_clients(url).await {
            run_on_all(
                std::slice::from_ref(url),
                &[client("KILL").arg("ID").arg(id).to_owned()],
            )
            .await;
        }
    }
    run_on_all(&urls, &[client("UNPAUSE")]).await;
    match guarded("unlock", unlock).await.expect("join") {
        Err(Error::LockLost { .. }) => {}
        other => panic!("unlock after an overwrite: {other:?}"),
    }
    for url in &urls {
        let value: Option<String> = redis::cmd("GET")
            .arg(&lock_key)
            .query_async(&mut conn(url).await)
            .await
            .expect("get");
        assert_eq!(
            value.as_deref(),
            Some(other),
            "{url}: the other value was touched"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_release_then_someone_elses_key_is_a_lost_lock() {
    unanswered_release_then_someone_elses_key(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_release_then_someone_elses_key_is_a_lost_lock_on_redlock() {
    unanswered_release_then_someone_elses_key(3).await;
}

/// A release that got no answer (the server stopped) and that Redis then
/// applied, handing the lock to a fair waiter: the retry finds the
/// waiter's later grant, which our own release made, so unlock succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_release_handed_to_a_waiter_is_not_lost() {
    let server = rs::RedisServer::start();
    let prefix = rs::unique_prefix("handed-release");
    let config = RedisConfig::new([server.url.clone()])
        .with_prefix(prefix.clone())
        .with_data_loss_wait(Duration::ZERO)
        .with_ttl(Duration::from_secs(60));
    let locker = RedisLocker::connect(config, true).await.expect("connect");
    let key = Key::from("h");
    // Warm up: the scripts loaded, the connection up.
    let warm = locker
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("free");
    warm.unlock().await.expect("unlock");
    let guard = locker
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("free");
    let (waiter, k) = (locker.locker(true), key.clone());
    let waiting = tokio::spawn(async move { waiter.lock(&patient(), &k).await });
    guarded("queued", rs::wait_queued(&server.url, &prefix, &key, 1)).await;
    server.signal("-STOP");
    let unlock = tokio::spawn(guard.unlock());
    // The release and one retry (sent after the first timed out) wait
    // unread at the stopped server; it applies both once continued.
    guarded("requests", rs::wait_unread_requests(server.port, 2)).await;
    server.signal("-CONT");
    let res = guarded("unlock", unlock).await.expect("join");
    assert!(res.is_ok(), "own release reported as {res:?}");
    let next = guarded("waiter", waiting)
        .await
        .expect("join")
        .expect("lock");
    next.unlock().await.expect("unlock");
    guarded("clean", rs::wait_clean(&server.url, &prefix)).await;
}
