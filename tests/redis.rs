//! The conformance suite and Redis-only behaviour against one real
//! redis-server that the tests start themselves (see tests/support).
#![cfg(feature = "redis")]

mod support;

use std::time::Duration;

use fairlock::conformance::{Backend, patient};
use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{Context, Error, Key, Locker};
use support::redis_backend::{RedisBackend as Redis, take};
use support::redis_server::{self as rs, RedisServer, conn};

async fn connect(urls: Vec<String>, test: &str, ttl: Duration) -> Redis {
    let config = RedisConfig::new(urls)
        .with_prefix(rs::unique_prefix(test))
        .with_data_loss_wait(Duration::ZERO)
        .with_ttl(ttl);
    Redis::connect(config).await
}

/// One redis-server: the conformance suite runs here with read/write
/// locks and semaphores.
async fn redis(test: &str) -> Redis {
    connect(
        vec![rs::shared().url.clone()],
        test,
        Duration::from_secs(10),
    )
    .await
    .with_shared()
}

fairlock::conformance_tests!(redis);

/// 10,000 `lock` calls at once from one process: before each node kept
/// its requests in flight bounded, the last ones waited over 250 ms behind
/// the first and failed as "no answer" (`node.rs`, `IN_FLIGHT`).
#[test]
fn ten_thousand_waiters_at_once_are_served() {
    fairlock::conformance::run(async {
        let r = redis("burst-10k").await;
        fairlock::conformance::a_burst_of_waiters_is_served(&r, true, 10_000).await;
    });
}

async fn get(url: &str, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut conn(url).await)
        .await
        .expect("get")
}

/// Spawns a task in which `locker` waits for `key`, then unlocks it; returns
/// once it is the `n`th waiter queued.
async fn queue_waiter(
    r: &Redis,
    locker: RedisLocker,
    key: &Key,
    n: usize,
) -> tokio::task::JoinHandle<fairlock::Result<()>> {
    let k = key.clone();
    let waiter = tokio::spawn(async move {
        locker
            .lock(&patient(), &k)
            .await
            .expect("lock")
            .unlock()
            .await
    });
    r.wait_queued(key, n).await;
    waiter
}

/// A holder whose key expired and was taken by another: its watchdog
/// reports the loss, and its unlock says so without touching the new
/// holder's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_never_deletes_another_holders_key() {
    let r = redis("takeover").await;
    let url = &r.urls[0];
    let key = Key::from("k");
    let (a, b) = (r.base.locker(false), r.base.locker(false));
    let old = take(&a, &key).await;
    let lost = old.lost_token();
    // The key expires under the holder (as after a long pause) ...
    let lock_key = r.lock_key(&key);
    let () = redis::cmd("PEXPIRE")
        .arg(&lock_key)
        .arg(1)
        .query_async(&mut conn(url).await)
        .await
        .expect("pexpire");
    // ... and someone else takes the lock.
    let new = b.lock(&patient(), &key).await.expect("lock after expiry");
    assert!(new.fencing_token() > old.fencing_token());
    let held_by_new = get(url, &lock_key).await.expect("new holder's key");
    let err = old
        .unlock()
        .await
        .expect_err("the old guard's lock is gone");
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    assert_eq!(
        get(url, &lock_key).await.as_deref(),
        Some(held_by_new.as_str())
    );
    assert!(new.is_held());
    new.unlock().await.expect("unlock");
    drop(lost);
    r.wait_clean().await;
    r.finish().await;
}

/// The watchdog of a holder whose key was taken over is refused and
/// signals the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_extend_signals_the_loss() {
    let r = connect(
        vec![rs::shared().url.clone()],
        "refused",
        Duration::from_secs(1),
    )
    .await;
    let key = Key::from("k");
    let guard = take(&r.base, &key).await;
    let () = redis::cmd("SET")
        .arg(r.lock_key(&key))
        .arg("999999 someone-else")
        .query_async(&mut conn(&r.urls[0]).await)
        .await
        .expect("overwrite");
    tokio::time::timeout(Duration::from_secs(120), guard.lost())
        .await
        .expect("the loss is never signalled");
    assert!(!guard.is_held());
    assert_eq!(guard.loss_cause(), Some(fairlock::LossCause::KeyChanged));
    assert!(guard.unlock().await.is_err());
    assert_eq!(
        get(&r.urls[0], &r.lock_key(&key)).await.as_deref(),
        Some("999999 someone-else"),
        "unlock touched another holder's key"
    );
    let () = redis::cmd("DEL")
        .arg(r.lock_key(&key))
        .query_async(&mut conn(&r.urls[0]).await)
        .await
        .expect("del");
    r.finish().await;
}

/// A holder whose Redis server is stopped (SIGSTOP) past the TTL learns its
/// lock is lost; after SIGCONT its unlock reports the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_server_makes_the_holder_lose_its_lock() {
    let server = RedisServer::start();
    let r = connect(vec![server.url.clone()], "stopped", Duration::from_secs(1)).await;
    let guard = take(&r.base, &Key::from("k")).await;
    assert!(guard.is_held());
    server.signal("-STOP");
    tokio::time::timeout(Duration::from_secs(120), guard.lost())
        .await
        .expect("the loss is never signalled");
    assert!(!guard.is_held());
    assert_eq!(guard.loss_cause(), Some(fairlock::LossCause::Expired));
    server.signal("-CONT");
    let err = guard.unlock().await.expect_err("lost");
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    r.wait_clean().await;
}

/// A release that Redis applies only after the per-node timeout (the
/// server was stopped) is retried; the retry finds the key gone, which is
/// our own release's doing, not a loss: unlock succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_release_is_not_reported_as_lost() {
    let server = RedisServer::start();
    let r = connect(vec![server.url.clone()], "slowrel", Duration::from_secs(60)).await;
    let key = Key::from("k");
    // Warm up: the scripts loaded, the connection up.
    let warm = take(&r.base, &key).await;
    warm.unlock().await.expect("unlock");
    let guard = take(&r.base, &key).await;
    let lost = guard.lost_token();
    server.signal("-STOP");
    let unlock = tokio::spawn(guard.unlock());
    // The release and one retry (sent after the first timed out) wait
    // unread at the stopped server; it applies both once continued.
    rs::wait_unread_requests(server.port, 2).await;
    server.signal("-CONT");
    let res = unlock.await.expect("task");
    assert!(res.is_ok(), "own release reported as {res:?}");
    assert!(!lost.is_cancelled());
    r.wait_clean().await;
    r.finish().await;
}

/// Waiters of both modes take a lock whose holder crashed (its key was
/// never released) once it expires, without a release to wake them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_holders_lock_is_taken_after_its_ttl() {
    let r = redis("crashed").await;
    for fair in [true, false] {
        let key = Key::from(format!("k-{fair}"));
        let () = redis::cmd("SET")
            .arg(r.lock_key(&key))
            .arg("1 crashed-holder pid=1")
            .arg("PX")
            .arg(1000)
            .query_async(&mut conn(&r.urls[0]).await)
            .await
            .expect("set");
        let guard = r
            .base
            .locker(fair)
            .lock(&patient(), &key)
            .await
            .expect("lock");
        assert!(guard.is_held());
        guard.unlock().await.expect("unlock");
    }
    r.wait_clean().await;
    r.finish().await;
}

/// Fencing tokens grow strictly with every grant, across lockers and keys.
#[tokio::test]
async fn fencing_tokens_strictly_increase() {
    let r = redis("tokens").await;
    let lockers = [r.base.locker(true), r.base.locker(false)];
    let mut last = 0;
    for i in 0..20 {
        let key = Key::from(format!("k{}", i % 3));
        let g = take(&lockers[i % 2], &key).await;
        assert!(
            g.fencing_token() > last,
            "{} after {last}",
            g.fencing_token()
        );
        last = g.fencing_token();
        g.unlock().await.expect("unlock");
    }
    r.finish().await;
}

/// A token of 15 digits or more is written whole into the lock key (Lua
/// writes such a number as `1e+14`, which no holder parses), so its
/// holder extends and releases it; a counter at 2^53, where Lua's doubles
/// stop counting exactly, is named rather than giving a token twice.
#[tokio::test]
async fn fencing_tokens_of_fifteen_digits_are_written_whole() {
    let r = redis("long tokens").await;
    let fence = format!("{}_OWNERS_/fence", r.prefix());
    let set = |value: u64| redis::cmd("SET").arg(&fence).arg(value).to_owned();
    let () = r.query(&set(99_999_999_999_999)).await;
    let key = Key::from("k");
    for (i, fair) in [true, false].into_iter().enumerate() {
        let guard = take(&r.base.locker(fair), &key).await;
        let token = 100_000_000_000_000 + i as u64;
        assert_eq!(guard.fencing_token(), token, "fair {fair}");
        let value: String = r.query(redis::cmd("GET").arg(r.lock_key(&key))).await;
        assert!(value.starts_with(&format!("{token} ")), "{value}");
        guard.unlock().await.expect("unlock");
    }
    let () = r.query(&set(1 << 53)).await;
    match r.base.locker(false).try_lock(&key).await {
        Err(e) => assert!(format!("{e:?}").contains(&fence), "{e:?}"),
        Ok(granted) => panic!(
            "a fence at 2^53 gave {:?}",
            granted.map(|g| g.fencing_token())
        ),
    }
    r.finish().await;
}

/// A server that does not answer is named in a clear error, within the
/// connect timeout.
/// A dataset that lost fairlock's data while a lock was held (`FLUSHALL`
/// here; a restart without persistence is the same to the scripts) grants
/// nothing until every lock it may have forgotten has expired: the
/// holder is told first, and the next token is above the holder's though
/// the fencing counter was lost too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dataset_that_lost_its_locks_grants_none_before_they_expired() {
    let server = RedisServer::start();
    let config = RedisConfig::new([server.url.clone()])
        .with_prefix(rs::unique_prefix("data-loss"))
        .with_ttl(Duration::from_secs(2));
    assert_eq!(config.data_loss_wait(), Duration::from_secs(2));
    let holder = RedisLocker::connect(config.clone(), false)
        .await
        .expect("connect");
    let next = RedisLocker::connect(config, true).await.expect("connect");
    let key = Key::from("k");
    let guard = holder.lock(&patient(), &key).await.expect("lock");
    let first = guard.fencing_token();
    let () = redis::cmd("FLUSHALL")
        .query_async(&mut conn(&server.url).await)
        .await
        .expect("flushall");
    // The first try finds no epoch and starts one a data loss wait ahead.
    assert!(next.try_lock(&key).await.expect("try_lock").is_none());
    let granted = next.lock(&patient(), &key).await.expect("lock");
    assert!(
        !guard.is_held(),
        "granted again while the first holder still holds (token {first})"
    );
    assert!(
        granted.fencing_token() > first,
        "token {} after {first}",
        granted.fencing_token()
    );
    assert!(matches!(guard.unlock().await, Err(Error::LockLost { .. })));
    granted.unlock().await.expect("unlock");
}

/// The URL's own options (`?data_loss_wait=0`) configure the locker as
/// `with_data_loss_wait` would: on a fresh dataset the first `try_lock` is
/// granted at once, where the default wait (the TTL) would refuse it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_in_the_url_are_applied() {
    let server = RedisServer::start();
    let config = RedisConfig::new([format!("{}?data_loss_wait=0", server.url)])
        .with_prefix(rs::unique_prefix("url-options"))
        .with_ttl(Duration::from_secs(60));
    let locker = RedisLocker::connect(config, false).await.expect("connect");
    assert_eq!(locker.config().data_loss_wait(), Duration::ZERO);
    assert_eq!(locker.config().urls(), std::slice::from_ref(&server.url));
    let guard = locker
        .try_lock(&Key::from("k"))
        .await
        .expect("try_lock")
        .expect("granted on a fresh dataset with no data loss wait");
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn unreachable_server_is_named_in_the_error() {
    let port = support::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let config = RedisConfig::new([url.clone()]).with_connect_timeout(Duration::from_secs(1));
    let err = RedisLocker::connect(config, true)
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    assert!(err.to_string().contains(&url), "{err}");
}

/// Bad configurations are refused before anything is sent, saying what to
/// change.
#[tokio::test]
async fn bad_configuration_is_refused() {
    for (config, says) in [
        (RedisConfig::new(Vec::<String>::new()), "no Redis URLs"),
        (RedisConfig::new(["localhost:6379"]), "redis://"),
        (RedisConfig::new(["redis://h:notaport"]), "does not parse"),
        (
            RedisConfig::new([rs::shared().url.clone()]).with_ttl(Duration::from_millis(10)),
            "minimum",
        ),
    ] {
        let err = RedisLocker::connect(config, false)
            .await
            .err()
            .expect("refused");
        assert!(
            matches!(err, Error::InvalidConfig(_)) && err.to_string().contains(says),
            "{err}"
        );
    }
    let err = fairlock::BackendConfig::from_endpoints(["redis://a:1", "127.0.0.1:2379"])
        .expect_err("mixed");
    assert!(err.to_string().contains("mix"), "{err}");
}

/// `status` shows the holder with its token and TTL, and the queue in
/// arrival order with each waiter's locker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_holder_and_queue_in_order() {
    // A TTL of an hour: the watchdog's first extend is 20 minutes away.
    let r = connect(
        vec![rs::shared().url.clone()],
        "status",
        Duration::from_secs(3600),
    )
    .await;
    let key = Key::from("k");
    let holder = r.base.locker(true);
    let guard = take(&holder, &key).await;
    let mut waiters = Vec::new();
    let mut ids = Vec::new();
    for i in 0..3 {
        let locker = r.base.locker(i != 1);
        ids.push(locker.id().to_owned());
        waiters.push(queue_waiter(&r, locker, &key, i + 1).await);
    }
    let () = redis::cmd("PEXPIRE")
        .arg(r.lock_key(&key))
        .arg(7_200_000)
        .query_async(&mut conn(&r.urls[0]).await)
        .await
        .expect("pexpire");
    let locks = r.base.status(None).await.expect("status");
    assert_eq!(locks.len(), 1, "{locks:?}");
    let lock = &locks[0];
    assert_eq!(lock.key, "k");
    let h = lock.holder.as_ref().expect("holder");
    assert_eq!(h.fencing_token, guard.fencing_token());
    assert_eq!(h.owner.pid, Some(std::process::id()));
    // The TTL left is the key's own: it was given two hours, more than
    // the lock's TTL (and no extend comes before 20 minutes).
    assert!(
        h.ttl_left
            .is_some_and(|t| t > Duration::from_secs(3600) && t <= Duration::from_secs(7200)),
        "{:?}",
        h.ttl_left
    );
    let order: Vec<_> = lock
        .waiters
        .iter()
        .map(|w| (w.locker.clone(), w.fair))
        .collect();
    assert_eq!(
        order,
        [
            (ids[0].clone(), true),
            (ids[1].clone(), false),
            (ids[2].clone(), true)
        ]
    );
    assert_eq!(r.base.status(Some(&key)).await.expect("status").len(), 1);
    guard.unlock().await.expect("unlock");
    for w in waiters {
        w.await.expect("task").expect("unlock");
    }
    r.wait_clean().await;
    assert!(r.base.status(None).await.expect("status").is_empty());
    r.finish().await;
}

/// Many waiters share one pub/sub subscription per connection, not one
/// each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_share_one_subscription() {
    let r = redis("pubsub").await;
    let key = Key::from("k");
    let guard = take(&r.base, &key).await;
    let mut waiters = Vec::new();
    for i in 0..10 {
        let locker = r.base.locker(true);
        waiters.push(queue_waiter(&r, locker, &key, i + 1).await);
    }
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(format!("{}_OWNERS_/wake/*", r.prefix()))
        .query_async(&mut conn(&r.urls[0]).await)
        .await
        .expect("pubsub channels");
    assert_eq!(channels.len(), 1, "{channels:?}");
    guard.unlock().await.expect("unlock");
    for w in waiters {
        w.await.expect("task").expect("unlock");
    }
    r.wait_clean().await;
    r.finish().await;
}

/// `BackendConfig` picks Redis for a redis:// URL and registers it (with
/// the default data loss wait: the new prefix's first grant waits a TTL).
#[tokio::test]
async fn registry_hands_out_redis_lockers() {
    let prefix = rs::unique_prefix("registry");
    fairlock::BackendConfig::from_endpoints([rs::shared().url.clone()])
        .expect("redis")
        .with_prefix(prefix.clone())
        .with_ttl(Duration::from_secs(2))
        .register()
        .await
        .expect("register");
    let locker = fairlock::get_locker(true).expect("locker");
    assert!(locker.is_fair());
    let key = Key::from("k");
    // The first try starts the prefix's epoch a TTL ahead: nothing yet.
    assert!(locker.try_lock(&key).await.expect("try_lock").is_none());
    let guard = locker.lock(&patient(), &key).await.expect("lock");
    guard.unlock().await.expect("unlock");
    assert!(rs::keys_left(&rs::shared().url, &prefix).await.is_empty());
}

// ---- read/write locks and semaphores ------------------------------------

/// The ids in the line of `key`, in order.
async fn line_ids(r: &Redis, key: &Key) -> Vec<String> {
    r.query(redis::cmd("ZRANGE").arg(r.line(key)).arg(0).arg(-1))
        .await
}

/// A holder that crashed (its entry was never left, nor extended): its
/// share frees once its record expires, without a release, for waiters of
/// both modes and every kind; never before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_holders_share_frees_after_its_ttl() {
    let r = redis("crashed-share").await;
    // The crashed holders' token, 5, came from the fencing counter.
    let fence = format!("{}_OWNERS_/fence", r.prefix());
    let () = r.query(redis::cmd("SET").arg(fence).arg(5)).await;
    for fair in [true, false] {
        for (kind, record) in [
            ("read", "w 0 1 - 5 3000 crashed-holder pid=1"),
            ("write", "r 0 1 - 5 3000 crashed-holder pid=1"),
            ("permit", "s 1 1 - 5 3000 crashed-holder pid=1"),
        ] {
            let key = Key::from(format!("k-{fair}-{kind}"));
            let entry = r.entry(&key, "wcrashed");
            let () = r
                .query(
                    redis::cmd("SET")
                        .arg(&entry)
                        .arg(record)
                        .arg("PX")
                        .arg(1000),
                )
                .await;
            let () = r
                .query(redis::cmd("ZADD").arg(r.line(&key)).arg(1).arg("wcrashed"))
                .await;
            let locker = r.base.locker(fair);
            let guard = match kind {
                "read" => locker.read_lock(&patient(), &key).await,
                "write" => locker.write_lock(&patient(), &key).await,
                _ => locker.acquire_permits(&patient(), &key, 1, 1).await,
            }
            .expect("granted after the crashed holder's TTL");
            let left: bool = r.query(redis::cmd("EXISTS").arg(&entry)).await;
            assert!(
                !left,
                "granted {kind} while the crashed holder's entry lived"
            );
            assert!(guard.is_held());
            assert!(guard.fencing_token() > 5, "tokens grow");
            guard.unlock().await.expect("unlock");
        }
    }
    r.wait_clean().await;
    r.finish().await;
}

/// A waiter whose entry vanished (its record or its line member deleted)
/// fails with SessionLost instead of being granted or joining again at
/// the back, and leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_whose_entry_vanished_gets_session_lost() {
    let r = redis("vanished").await;
    for what in ["record", "member"] {
        let key = Key::from(format!("k-{what}"));
        let holder = r.base.locker(true);
        let held = holder.write_lock(&patient(), &key).await.expect("write");
        let waiter = {
            let (locker, key) = (r.base.locker(true), key.clone());
            tokio::spawn(async move { locker.read_lock(&patient(), &key).await.map(drop) })
        };
        r.wait_queued(&key, 2).await;
        let id = line_ids(&r, &key).await.pop().expect("the waiter's entry");
        let () = match what {
            "record" => r.query(redis::cmd("DEL").arg(r.entry(&key, &id))).await,
            _ => r.query(redis::cmd("ZREM").arg(r.line(&key)).arg(&id)).await,
        };
        // The release walks the line: it must not grant the vanished
        // waiter, whose next check then finds its entry gone.
        held.unlock().await.expect("unlock");
        let err = waiter.await.expect("task").expect_err("its entry is gone");
        assert!(matches!(err, Error::SessionLost { .. }), "{what}: {err}");
        r.wait_clean().await;
    }
    r.finish().await;
}

/// `lock` and `try_lock` of a key held as a read lock are its write lock
/// (`None`, or a wait that times out while the reader holds, leaving
/// nothing behind); read and write locks of a key held or awaited as a
/// mutex wait for it (`None`, or a timeout), and semaphores are refused
/// (InvalidKey, at once); nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_and_shared_locks_on_one_key() {
    let r = redis("kinds").await;
    let key = Key::from("k");
    let (a, b) = (r.base.locker(true), r.base.locker(false));
    let read = a.read_lock(&patient(), &key).await.expect("read");
    for locker in [&a, &b] {
        let taken = locker.try_lock(&key).await.expect("try_lock");
        assert!(taken.is_none(), "the write lock granted beside a reader");
        let short = Context::background().with_timeout(Duration::from_millis(100));
        let err = locker.lock(&short, &key).await.map(drop).expect_err("lock");
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
    }
    read.unlock().await.expect("unlock");
    assert!(r.is_clean().await, "a refused mutex left something behind");

    let mutex = take(&a, &key).await;
    let waiter = queue_waiter(&r, r.base.locker(true), &key, 1).await;
    assert!(
        b.try_read_lock(&key)
            .await
            .expect("try_read_lock")
            .is_none()
    );
    let short = Context::background().with_timeout(Duration::from_millis(100));
    let err = b
        .write_lock(&short, &key)
        .await
        .map(drop)
        .expect_err("waits");
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    let refused = [
        b.try_acquire_permits(&key, 1, 2).await.map(drop),
        b.acquire_permits(&patient(), &key, 1, 2).await.map(drop),
    ];
    for err in refused {
        let err = err.expect_err("refused");
        assert!(matches!(err, Error::InvalidKey { .. }), "{err}");
        assert!(err.to_string().contains("mutex"), "{err}");
    }
    mutex.unlock().await.expect("unlock");
    // Only the mutex's waiter is left: it gets the mutex.
    waiter.await.expect("task").expect("unlock");
    r.wait_clean().await;
    r.finish().await;
}

/// One release wakes exactly the waiters it grants: the writer's release
/// grants the two readers behind it together (two messages, not three,
/// the writer behind them not woken); the last reader's release wakes
/// the writer alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_only_whom_it_grants() {
    use futures_util::StreamExt;
    let r = redis("herd").await;
    let key = Key::from("k");
    let wake = format!("{}_OWNERS_/wake/", r.prefix());
    let mut pubsub = rs::client_for(&r.urls[0])
        .get_async_pubsub()
        .await
        .expect("pubsub");
    pubsub
        .psubscribe(format!("{wake}*"))
        .await
        .expect("psubscribe");
    let mut messages = pubsub.into_on_message();
    // Every message published before the marker arrives before it.
    let woken = |marker: &'static str| {
        let url = r.urls[0].clone();
        let channel = format!("{wake}marker");
        async move {
            let () = redis::cmd("PUBLISH")
                .arg(channel)
                .arg(marker)
                .query_async(&mut conn(&url).await)
                .await
                .expect("publish");
        }
    };
    let held = r
        .base
        .locker(true)
        .write_lock(&patient(), &key)
        .await
        .expect("write");
    let mut tasks = Vec::new();
    for (i, write) in [(2, false), (3, false), (4, true)] {
        let (locker, k) = (r.base.locker(true), key.clone());
        tasks.push(tokio::spawn(async move {
            let guard = if write {
                locker.write_lock(&patient(), &k).await
            } else {
                locker.read_lock(&patient(), &k).await
            };
            guard.expect("granted")
        }));
        r.wait_queued(&key, i).await;
    }
    let ids = line_ids(&r, &key).await;
    let mut count_until = async |marker: &str| {
        let mut seen = Vec::new();
        loop {
            let msg = messages.next().await.expect("message");
            let payload: String = msg.get_payload().expect("payload");
            if payload == marker {
                return seen;
            }
            seen.push(payload);
        }
    };
    held.unlock().await.expect("unlock");
    woken("first").await;
    assert_eq!(
        count_until("first").await,
        ids[1..3],
        "the two readers, only"
    );
    let mut tasks = tasks.into_iter();
    let readers = [
        tasks.next().expect("r1").await.expect("task"),
        tasks.next().expect("r2").await.expect("task"),
    ];
    let [r1, r2] = readers;
    r1.unlock().await.expect("unlock");
    woken("second").await;
    assert!(
        count_until("second").await.is_empty(),
        "woken with a reader left"
    );
    r2.unlock().await.expect("unlock");
    woken("third").await;
    assert_eq!(count_until("third").await, ids[3..], "the writer, only");
    let writer = tasks.next().expect("writer").await.expect("task");
    writer.unlock().await.expect("unlock");
    r.wait_clean().await;
    r.finish().await;
}

/// A held read lock is extended by its watchdog past its TTL (its
/// record renewed again and again, a writer still kept out); once its
/// entry is deleted, the next extend signals the loss and unlock says
/// the lock was lost, without touching the line it no longer holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_shares_are_extended_and_their_loss_signalled() {
    let r = connect(
        vec![rs::shared().url.clone()],
        "extend-share",
        Duration::from_secs(1),
    )
    .await
    .with_shared();
    let key = Key::from("k");
    let guard = r.base.read_lock(&patient(), &key).await.expect("read");
    let id = line_ids(&r, &key).await.pop().expect("its entry");
    let record = r.entry(&key, &id);
    // Four renewals of a 1 s TTL: held for more than a TTL.
    let last = std::sync::atomic::AtomicI64::new(r.query(redis::cmd("PTTL").arg(&record)).await);
    for _ in 0..4 {
        rs::wait_until(&r.urls[0], r.prefix(), || async {
            let now: i64 = r.query(redis::cmd("PTTL").arg(&record)).await;
            now > last.swap(now, std::sync::atomic::Ordering::SeqCst)
        })
        .await;
    }
    assert!(guard.is_held());
    assert!(r.base.try_write_lock(&key).await.expect("try").is_none());
    let lost = guard.lost_token();
    let () = r.query(redis::cmd("DEL").arg(&record)).await;
    tokio::time::timeout(Duration::from_secs(120), lost.cancelled())
        .await
        .expect("the loss is never signalled");
    assert!(!guard.is_held());
    assert_eq!(guard.loss_cause(), Some(fairlock::LossCause::KeyChanged));
    let err = guard.unlock().await.expect_err("lost");
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    r.wait_clean().await;
    r.finish().await;
}

/// `status` of a read/write lock and of a semaphore lists every holder
/// (readers, permits held) and the waiters in line, with their modes, as
/// on etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_the_holders_and_waiters_of_a_line() {
    let r = redis("line-status").await;
    let key = Key::from("rw");
    let (a, b, c) = (
        r.base.locker(true),
        r.base.locker(true),
        r.base.locker(true),
    );
    let r1 = a.read_lock(&patient(), &key).await.expect("read");
    let r2 = b.read_lock(&patient(), &key).await.expect("read");
    let writer = {
        let (c, key) = (c.clone(), key.clone());
        tokio::spawn(async move { c.write_lock(&patient(), &key).await?.unlock().await })
    };
    r.wait_queued(&key, 3).await;
    let status = r.base.status(Some(&key)).await.expect("status");
    let lock = &status[0];
    assert_eq!(lock.kind, fairlock::LockKind::ReadWrite, "{lock:?}");
    assert_eq!(lock.holders.len(), 2, "{lock:?}");
    assert!(lock.holders.iter().all(|h| h.reads), "{lock:?}");
    assert_eq!(
        lock.holder.as_ref().map(|h| h.fencing_token),
        Some(r1.fencing_token())
    );
    assert_eq!(lock.waiters.len(), 1, "{lock:?}");
    assert!(
        !lock.waiters[0].reads && lock.waiters[0].locker == c.id(),
        "{lock:?}"
    );
    r1.unlock().await.expect("unlock");
    r2.unlock().await.expect("unlock");
    writer.await.expect("join").expect("write");

    let sem = Key::from("sem");
    let two = a
        .acquire_permits(&patient(), &sem, 2, 3)
        .await
        .expect("permits");
    let status = r.base.status(Some(&sem)).await.expect("status");
    let lock = &status[0];
    assert_eq!(
        lock.kind,
        fairlock::LockKind::Semaphore { limit: 3 },
        "{lock:?}"
    );
    assert_eq!(lock.holders.len(), 1, "{lock:?}");
    assert_eq!(lock.holders[0].permits, 2, "{lock:?}");
    two.unlock().await.expect("unlock");
    r.wait_clean().await;
    assert!(r.base.status(None).await.expect("status").is_empty());
    r.finish().await;
}

/// The members of `key`'s fair queue, in order.
async fn queued_ids(r: &Redis, key: &Key) -> Vec<String> {
    r.query(redis::cmd("ZRANGE").arg(r.queue(key)).arg(0).arg(-1))
        .await
}

/// `lock_all` and `try_lock_all` over a key whose queue holds data
/// fairlock did not write fail at once, in both modes, naming that key
/// and what fairlock keeps there, with nothing written to the other keys
/// (every key is checked before the one script writes anything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_all_refuses_foreign_data_before_writing() {
    let r = redis("all-foreign").await;
    let (a, b) = (Key::from("a"), Key::from("b"));
    let queue = r.queue(&b);
    let () = r
        .query(redis::cmd("SET").arg(&queue).arg("someone else's"))
        .await;
    for fair in [true, false] {
        let l = r.locker(fair);
        for err in [
            l.lock_all(&patient(), &[a.clone(), b.clone()])
                .await
                .map(drop),
            l.try_lock_all(&[a.clone(), b.clone()]).await.map(drop),
        ] {
            let text = format!("{:?}", err.expect_err("refused"));
            assert!(
                text.contains(&format!("redis-cli DEL '{queue}'"))
                    && text.contains("where fairlock keeps the queue of waiters"),
                "{text}"
            );
            let left = r.keys_left().await;
            assert_eq!(left, [format!("{}: {queue}", r.urls[0])], "written");
        }
    }
    let () = r.query(redis::cmd("DEL").arg(&queue)).await;
    r.finish().await;
}

/// A fair `lock_all` waiter whose entry in one queue vanishes (as when
/// its record expires) does not queue again at the end of that queue
/// alone, which would break the one order of its places: it gives up
/// every key and joins every queue again in one step, then is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_all_rejoins_every_queue_when_a_place_is_lost() {
    let r = redis("all-lost").await;
    let (a, b) = (Key::from("a"), Key::from("b"));
    let holder = r.locker(true);
    let (ha, hb) = (take(&*holder, &a).await, take(&*holder, &b).await);
    let waiter = {
        let (w, both) = (r.locker(true), [a.clone(), b.clone()]);
        tokio::spawn(async move { w.lock_all(&patient(), &both).await })
    };
    r.wait_queued(&a, 1).await;
    r.wait_queued(&b, 1).await;
    let (old_a, old_b) = (queued_ids(&r, &a).await, queued_ids(&r, &b).await);
    let () = r
        .query(redis::cmd("ZREM").arg(r.queue(&b)).arg(&old_b[0]))
        .await;
    rs::wait_until(&r.urls[0], r.prefix(), || async {
        let (now_a, now_b) = (queued_ids(&r, &a).await, queued_ids(&r, &b).await);
        now_a.len() == 1 && now_b.len() == 1 && now_a != old_a
    })
    .await;
    ha.unlock().await.expect("unlock");
    hb.unlock().await.expect("unlock");
    let both = waiter.await.expect("task").expect("lock_all");
    assert!(both.is_held());
    both.unlock().await.expect("unlock");
    r.wait_clean().await;
    r.finish().await;
}

/// An unfair `lock_all` waiter holds no key and keeps one queue entry,
/// in the queue of a key someone else holds (so that its release wakes
/// it), moving it when that key is free but another is held; it takes
/// every key once all are free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfair_lock_all_waits_with_one_entry_where_a_key_is_held() {
    let r = redis("all-unfair").await;
    let (a, b) = (Key::from("a"), Key::from("b"));
    let other = r.locker(false);
    let hb = take(&*other, &b).await;
    let waiter = {
        let (w, both) = (r.locker(false), [a.clone(), b.clone()]);
        tokio::spawn(async move { w.lock_all(&patient(), &both).await })
    };
    r.wait_queued(&b, 1).await;
    assert!(
        queued_ids(&r, &a).await.is_empty(),
        "queued where it is free"
    );
    // It holds nothing meanwhile.
    let ha = take(&*other, &a).await;
    hb.unlock().await.expect("unlock");
    // Woken by b's release, it finds a held: its entry moves there, in
    // the script that leaves b's queue.
    r.wait_queued(&a, 1).await;
    assert!(queued_ids(&r, &b).await.is_empty(), "two entries");
    ha.unlock().await.expect("unlock");
    let both = waiter.await.expect("task").expect("lock_all");
    assert!(both.is_held());
    both.unlock().await.expect("unlock");
    assert!(r.is_clean().await, "an entry left behind");
    r.finish().await;
}

/// A `lock_all` guard's unlock releases every key in one script: MONITOR
/// (Redis's log of every command, in order) shows one script run naming
/// the call's keys between the unlock and a marker sent after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_all_unlock_is_one_script() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let r = redis("all-one-script").await;
    let prefix = r.prefix().to_owned();
    let url = rs::shared().url.clone();
    let keys: Vec<Key> = ["a", "b", "c"].map(Key::from).to_vec();
    let l = r.locker(true);
    // Once before watching: a first run of a script loads it.
    let held = l.lock_all(&patient(), &keys).await.expect("lock_all");
    held.unlock().await.expect("unlock");
    let held = l.lock_all(&patient(), &keys).await.expect("lock_all");

    let stream = tokio::net::TcpStream::connect(("127.0.0.1", rs::shared().port))
        .await
        .expect("connect");
    let mut monitor = BufReader::new(stream);
    monitor
        .get_mut()
        .write_all(b"MONITOR\r\n")
        .await
        .expect("monitor");
    let mut line = String::new();
    monitor.read_line(&mut line).await.expect("read");
    assert_eq!(line.trim_end(), "+OK");
    held.unlock().await.expect("unlock");
    let marker = format!("{prefix}end");
    let _: String = redis::cmd("ECHO")
        .arg(&marker)
        .query_async(&mut conn(&url).await)
        .await
        .expect("echo");
    let mut runs = Vec::new();
    loop {
        line.clear();
        monitor.read_line(&mut line).await.expect("read");
        if line.contains(&marker) {
            break;
        }
        let script = line.to_ascii_uppercase().contains("\"EVALSHA\"");
        if script && line.contains(&prefix) {
            runs.push(line.clone());
        }
    }
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert!(r.is_clean().await);
}
