//! The conformance suite on Redlock over five real redis-servers, and what
//! happens when masters die (see tests/support).
#![cfg(feature = "redis")]

mod support;

use std::time::Duration;

use fairlock::conformance::{Backend, patient};
use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{Context, Error, Key, Locker};
use support::redis_backend::{RedisBackend as Redlock, take};
use support::redis_server::{self as rs, RedisServer, conn};

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(|s| s.url.clone()).collect()
}

async fn connect(servers: &[RedisServer], test: &str) -> Redlock {
    Redlock::connect(
        RedisConfig::new(urls(servers))
            .with_prefix(rs::unique_prefix(test))
            .with_data_loss_wait(Duration::ZERO),
    )
    .await
}

async fn redlock(test: &str) -> Redlock {
    connect(rs::shared_five(), test).await
}

fairlock::conformance_tests!(redlock);

/// A lock with five masters, two of them killed, is still granted; with
/// three killed it is a clear error naming how many answered, at once
/// (no hang), for try_lock and lock alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_down_still_grant_three_down_is_a_clear_error() {
    let servers = rs::start_many(5);
    let r = connect(&servers, "kill").await;
    let locker = r.base.locker(false);
    let key = Key::from("k");
    let guard = locker.lock(&patient(), &key).await.expect("lock, all up");
    let first = guard.fencing_token();
    guard.unlock().await.expect("unlock");
    servers[0].stop();
    servers[1].stop();
    let guard = locker
        .try_lock(&key)
        .await
        .expect("try_lock with 3 of 5")
        .expect("free");
    assert!(guard.fencing_token() > first);
    let other = r.base.locker(false);
    assert!(other.try_lock(&key).await.expect("try_lock").is_none());
    guard.unlock().await.expect("unlock with 3 of 5");
    let guard = locker
        .lock(&patient(), &key)
        .await
        .expect("lock with 3 of 5");
    guard.unlock().await.expect("unlock");
    servers[2].stop();
    for err in [
        locker.try_lock(&key).await.expect_err("2 of 5"),
        locker.lock(&patient(), &key).await.expect_err("2 of 5"),
    ] {
        let text = err.to_string();
        assert!(
            matches!(
                err,
                Error::Unavailable {
                    answered: 2,
                    needed: 3,
                    total: 5,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(text.contains("only 2 of 5 redis nodes answered"), "{text}");
    }
}

/// A holder whose majority of masters dies learns that its lock is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_learns_of_loss_when_a_majority_dies() {
    let servers = rs::start_many(5);
    let config = RedisConfig::new(urls(&servers))
        .with_prefix(rs::unique_prefix("majority"))
        .with_data_loss_wait(Duration::ZERO)
        .with_ttl(Duration::from_secs(1));
    let locker = RedisLocker::connect(config, false).await.expect("connect");
    let guard = take(&locker, &Key::from("k")).await;
    assert!(guard.is_held());
    for s in &servers[..3] {
        s.stop();
    }
    tokio::time::timeout(Duration::from_secs(120), guard.lost())
        .await
        .expect("the loss is never signalled");
    assert!(!guard.is_held());
    let err = guard.unlock().await.expect_err("lost");
    assert!(
        matches!(err, Error::LockLost { .. } | Error::Unavailable { .. }),
        "{err}"
    );
}

/// Fair mode on Redlock is refused with advice, from connect and from a
/// fair locker handed out for the same nodes.
#[tokio::test]
async fn fair_mode_is_refused_on_redlock() {
    let servers = rs::shared_five();
    let config = RedisConfig::new(urls(servers))
        .with_prefix(rs::unique_prefix("fair"))
        .with_data_loss_wait(Duration::ZERO);
    let err = RedisLocker::connect(config, true)
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    assert!(err.to_string().contains("one Redis instance"), "{err}");
    let r = redlock("fair2").await;
    let fair = r.base.locker(true);
    let err = fair.try_lock(&Key::from("k")).await.expect_err("refused");
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    let err = fair
        .lock(&patient(), &Key::from("k"))
        .await
        .expect_err("refused");
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    r.finish().await;
}

/// Read/write locks and semaphores are refused on Redlock (a line on
/// independent masters has no one arrival order), in both modes, saying
/// what to use instead, before anything is written.
#[tokio::test]
async fn shared_locks_are_refused_on_redlock() {
    let r = redlock("shared").await;
    let key = Key::from("k");
    for fair in [false, true] {
        let locker = r.base.locker(fair);
        for err in [
            locker.read_lock(&patient(), &key).await.map(drop),
            locker.try_read_lock(&key).await.map(drop),
            locker.write_lock(&patient(), &key).await.map(drop),
            locker.try_write_lock(&key).await.map(drop),
            locker
                .acquire_permits(&patient(), &key, 1, 2)
                .await
                .map(drop),
            locker.try_acquire_permits(&key, 1, 2).await.map(drop),
        ] {
            let err = err.expect_err("refused");
            assert!(matches!(err, Error::Unsupported(_)), "{err}");
            let text = err.to_string();
            assert!(
                text.contains("single Redis instance") && text.contains("etcd"),
                "{text}"
            );
        }
    }
    r.finish().await;
}

/// `lock_all` and `try_lock_all` are refused on Redlock for good (one
/// atomic step over independent masters does not exist), in both modes,
/// saying what to use instead, before anything is written.
#[tokio::test]
async fn lock_all_is_refused_on_redlock() {
    let r = redlock("all-refused").await;
    let keys = [Key::from("a"), Key::from("b")];
    for fair in [false, true] {
        let locker = r.base.locker(fair);
        for err in [
            locker.lock_all(&patient(), &keys).await.map(drop),
            locker.try_lock_all(&keys).await.map(drop),
        ] {
            let err = err.expect_err("refused");
            assert!(matches!(err, Error::Unsupported(_)), "{err}");
            let text = err.to_string();
            assert!(
                text.contains("lock_all on Redlock")
                    && text.contains("one atomic step")
                    && text.contains("etcd"),
                "{text}"
            );
        }
    }
    assert!(r.is_clean().await, "a refused lock_all left keys behind");
    r.finish().await;
}

/// Fencing tokens keep growing when the masters' counters disagree: the
/// highest among the quorum is taken and the others are raised to it, so
/// the next quorum, without the nodes that had the high counters, still
/// gives a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raise_keeps_tokens_growing_without_the_high_nodes() {
    let servers = rs::start_many(5);
    let r = connect(&servers, "raise").await;
    let fence = format!("{}_OWNERS_/fence", r.prefix());
    for s in &servers[..2] {
        let () = redis::cmd("SET")
            .arg(&fence)
            .arg(100)
            .query_async(&mut conn(&s.url).await)
            .await
            .expect("set");
    }
    let key = Key::from("k");
    let locker = r.base.locker(false);
    let guard = take(&locker, &key).await;
    let first = guard.fencing_token();
    assert!(first > 100, "{first}");
    guard.unlock().await.expect("unlock");
    servers[0].stop();
    servers[1].stop();
    let guard = take(&locker, &key).await;
    assert!(
        guard.fencing_token() > first,
        "token went back: {} after {first}",
        guard.fencing_token()
    );
    guard.unlock().await.expect("unlock");
}

/// A round that fails (two grants, two nodes held by another) also gives
/// the lock back on the node that did not answer in time: its acquire,
/// applied late, must not keep the lock there for a TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_round_releases_where_the_answer_was_late() {
    let servers = rs::start_many(5);
    // A TTL longer than the wait below: a late grant left behind outlives it.
    let config = RedisConfig::new(urls(&servers))
        .with_prefix(rs::unique_prefix("late"))
        .with_data_loss_wait(Duration::ZERO)
        .with_ttl(Duration::from_secs(600));
    let locker = RedisLocker::connect(config, false).await.expect("connect");
    let prefix = locker.config().prefix().to_owned();
    let key = Key::from("k");
    // Warm up (scripts loaded everywhere).
    let warm = take(&locker, &key).await;
    warm.unlock().await.expect("unlock");
    let lock_key = format!("{prefix}k");
    for s in &servers[1..3] {
        let () = redis::cmd("SET")
            .arg(&lock_key)
            .arg("1 someone-else")
            .query_async(&mut conn(&s.url).await)
            .await
            .expect("set");
    }
    servers[0].signal("-STOP");
    // Node 0 times out, 1 and 2 are busy, 3 and 4 grant: not a majority.
    assert!(locker.try_lock(&key).await.expect("try_lock").is_none());
    servers[0].signal("-CONT");
    for s in [&servers[0], &servers[3], &servers[4]] {
        rs::wait_clean(&s.url, &prefix).await;
    }
    for s in &servers[1..3] {
        let left = rs::keys_left(&s.url, &prefix).await;
        assert_eq!(
            left,
            std::slice::from_ref(&lock_key),
            "only the other holder's key"
        );
    }
}

/// A waiter honours its context while a node's wake-up subscription is
/// not up (the node refuses connections), even with a per-node timeout far
/// longer than the context.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_honours_the_context_while_a_subscription_is_down() {
    let live = rs::shared_five();
    let down = support::free_port();
    let config = RedisConfig::new([
        live[0].url.clone(),
        live[1].url.clone(),
        format!("redis://127.0.0.1:{down}"),
    ])
    .with_prefix(rs::unique_prefix("hubdown"))
    .with_data_loss_wait(Duration::ZERO)
    .with_ttl(Duration::from_secs(3600))
    .with_node_timeout(Duration::from_secs(600));
    let base = RedisLocker::connect(config, false).await.expect("connect");
    let key = Key::from("k");
    let held = take(&base, &key).await;
    let ctx = Context::background().with_timeout(Duration::from_millis(200));
    let waiter = base.locker(false);
    let err = tokio::time::timeout(Duration::from_secs(120), waiter.lock(&ctx, &key))
        .await
        .expect("lock ignored its context")
        .expect_err("held by another");
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    held.unlock().await.expect("unlock");
    let r = Redlock::new(base, vec![live[0].url.clone(), live[1].url.clone()]);
    r.wait_clean().await;
}
