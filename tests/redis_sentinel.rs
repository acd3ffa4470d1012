//! The conformance suite on a master behind Redis Sentinel (a master, its
//! replica and three sentinels, started here), failovers under a held
//! lock, and passwords for the master and the sentinels.
#![cfg(feature = "redis")]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fairlock::conformance::{Backend, patient};
use fairlock::redis::{Deployment, RedisConfig, RedisLocker};
use fairlock::{CancellationToken, Error, Key, LockGuard, Locker, LossCause};
use futures_util::StreamExt;
use support::redis_backend::{RedisBackend, take};
use support::redis_sentinel::{self as sd, Auth, RedisSentinel};
use support::redis_server::{self as rs};

async fn on(d: &RedisSentinel, test: &str, ttl: Duration) -> RedisBackend {
    let config = RedisConfig::new([d.url()])
        .with_prefix(rs::unique_prefix(test))
        .with_data_loss_wait(Duration::ZERO)
        .with_ttl(ttl);
    let base = RedisLocker::connect(config, false).await.expect("connect");
    RedisBackend::new(base, vec![d.master.url.clone()])
}

async fn sentinel(test: &str) -> RedisBackend {
    on(sd::shared(), test, Duration::from_secs(10)).await
}

fairlock::conformance_tests!(sentinel);

/// Leader election behind sentinels: campaigns, records and observers'
/// subscriptions all follow the master the sentinels name.
mod elections {
    use super::*;
    fairlock::election_conformance_tests!(sentinel);
}

/// Waits until the lock key is extended on the node at `url` (an `expire`
/// keyspace event, which PEXPIRE sends), or the guard is lost (`lost`, its
/// [`LockGuard::lost_token`]); `true` if extended.
async fn extended_or_lost(url: &str, lock_key: &str, lost: CancellationToken) -> bool {
    let mut pubsub = rs::client_for(url)
        .get_async_pubsub()
        .await
        .expect("pubsub");
    pubsub
        .subscribe(format!("__keyspace@0__:{lock_key}"))
        .await
        .expect("subscribe");
    let mut events = pubsub.into_on_message();
    let extended = async {
        while let Some(msg) = events.next().await {
            if msg.get_payload::<String>().as_deref() == Ok("expire") {
                return;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(120), async {
        tokio::select! {
            () = extended => true,
            () = lost.cancelled() => false,
        }
    })
    .await
    .expect("neither an extend nor a loss within 120 s")
}

/// Makes sure the replica has every write the master acknowledged.
async fn replicated(d: &RedisSentinel) {
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(0)
        .query_async(&mut rs::conn(&d.data_url(d.master.port)).await)
        .await
        .expect("wait");
    assert_eq!(acked, 1);
}

/// The master is killed while a lock is held and its replica, which has
/// the lock key, is promoted: the watchdog finds the new master through
/// the sentinels and extends the lock there; it stays held, unlocks, and
/// new locks are granted on the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_the_new_master_has_survives_failover() {
    let d = RedisSentinel::start(Auth::default());
    let r = on(&d, "kept", Duration::from_secs(10)).await;
    let key = Key::from("k");
    let guard = take(&r.base, &key).await;
    replicated(&d).await;
    let mut switches = d.switches().await;
    d.master.stop();
    let new = sd::next_switch(&mut switches).await;
    assert_eq!(new, d.replica.port);
    let new_url = d.data_url(new);
    assert!(
        extended_or_lost(&new_url, &r.lock_key(&key), guard.lost_token()).await,
        "lost a lock the new master has: {:?}",
        guard.loss_cause()
    );
    let other = r.base.locker(true);
    assert!(other.try_lock(&key).await.expect("try_lock").is_none());
    let first = guard.fencing_token();
    guard.unlock().await.expect("unlock on the new master");
    let next = other
        .lock(&patient(), &key)
        .await
        .expect("lock after failover");
    assert!(next.fencing_token() > first);
    next.unlock().await.expect("unlock");
    RedisBackend::new(r.base.clone(), vec![new_url])
        .finish()
        .await;
}

/// The master is killed while a lock is held, and the replica promoted
/// does not have the lock key (deleted there alone, as if the write had
/// not reached it before the master died): the holder is told its lock is
/// lost, never silently keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_the_new_master_lacks_is_reported_lost() {
    let d = RedisSentinel::start(Auth::default());
    let r = on(&d, "lost", Duration::from_secs(10)).await;
    let key = Key::from("k");
    let guard = take(&r.base, &key).await;
    replicated(&d).await;
    let replica_url = d.data_url(d.replica.port);
    let () = redis::cmd("DEL")
        .arg(r.lock_key(&key))
        .query_async(&mut rs::conn(&replica_url).await)
        .await
        .expect("del on the replica");
    let mut switches = d.switches().await;
    d.master.stop();
    assert_eq!(sd::next_switch(&mut switches).await, d.replica.port);
    assert!(
        !extended_or_lost(&replica_url, &r.lock_key(&key), guard.lost_token()).await,
        "extended a lock the new master does not have"
    );
    assert!(!guard.is_held());
    assert_eq!(guard.loss_cause(), Some(LossCause::KeyChanged));
    let err = guard.unlock().await.expect_err("lost");
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    let next = take(&r.base.locker(false), &key).await;
    next.unlock().await.expect("unlock");
    RedisBackend::new(r.base.clone(), vec![replica_url])
        .finish()
        .await;
}

/// A planned failover (`SENTINEL FAILOVER`) under a held lock, with the
/// defaults: the old master answers as a master for seconds after its
/// replica was promoted, but an extend counts only once the replica has
/// it, and the locker leaves the old master when the sentinels announce
/// the switch. Whether the holder keeps the lock (extended on the new
/// master) or is told it lost it, nobody else is granted while its guard
/// says it holds, and the next token is above its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_failover_never_grants_a_held_lock_twice() {
    let d = RedisSentinel::start(Auth::default());
    let prefix = rs::unique_prefix("planned");
    let config = RedisConfig::new([d.url()])
        .with_prefix(prefix.clone())
        .with_ttl(Duration::from_secs(1));
    let holder = RedisLocker::connect(config.clone(), false)
        .await
        .expect("connect");
    let other = RedisLocker::connect(config, false).await.expect("connect");
    let key = Key::from("k");
    let guard = holder.lock(&patient(), &key).await.expect("lock");
    let first = guard.fencing_token();
    let held = Arc::new(Mutex::new(Some(guard)));
    let mut switches = d.switches().await;
    let () = redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg(sd::MASTER)
        .query_async(&mut rs::conn(&d.sentinel_url(d.sentinels[0].port)).await)
        .await
        .expect("SENTINEL FAILOVER");
    let new = sd::next_switch(&mut switches).await;
    assert_eq!(new, d.replica.port);
    let waiter = {
        let held = Arc::clone(&held);
        let key = key.clone();
        tokio::spawn(async move {
            let granted = other.lock(&patient(), &key).await.expect("lock");
            let overlap = held
                .lock()
                .expect("held")
                .as_ref()
                .is_some_and(LockGuard::is_held);
            (granted, overlap)
        })
    };
    let lost = held
        .lock()
        .expect("held")
        .as_ref()
        .expect("held")
        .lost_token();
    let kept = extended_or_lost(&d.data_url(new), &format!("{prefix}{key}"), lost).await;
    let taken = held.lock().expect("held").take();
    if let Some(guard) = taken {
        let released = guard.unlock().await;
        assert_eq!(released.is_ok(), kept, "{released:?}");
    }
    let (granted, overlap) = waiter.await.expect("waiter");
    assert!(
        !overlap,
        "granted while the first holder (token {first}) held"
    );
    assert!(granted.fencing_token() > first);
    granted.unlock().await.expect("unlock");
}

/// Master and sentinels with passwords of their own: the URL's password
/// is the master's, `with_sentinel_password` the sentinels'; a wrong one
/// is an authentication error that does not show the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_for_master_and_sentinels() {
    let d = RedisSentinel::start(Auth {
        data: Some("data-pw"),
        sentinels: Some("sentinel-pw"),
    });
    let url = d
        .url()
        .replace("redis+sentinel://", "redis+sentinel://:data-pw@");
    let config = RedisConfig::new([url.clone()])
        .with_prefix(rs::unique_prefix("auth"))
        .with_data_loss_wait(Duration::ZERO)
        .with_sentinel_password("sentinel-pw");
    let locker = RedisLocker::connect(config.clone(), true)
        .await
        .expect("connect with both passwords");
    take(&locker, &Key::from("k"))
        .await
        .unlock()
        .await
        .expect("unlock");
    let wrong = RedisConfig::new([url])
        .with_sentinel_password("not-it")
        .with_connect_timeout(Duration::from_secs(2));
    let err = RedisLocker::connect(wrong, true)
        .await
        .err()
        .expect("refused");
    let text = format!("{err} {err:?}");
    assert!(
        !text.contains("data-pw") && !text.contains("not-it"),
        "{text}"
    );
    assert!(
        matches!(err, Error::Auth { .. } | Error::Connect { .. }),
        "{err:?}"
    );
}

/// Sentinels are named by `redis+sentinel://.../name` or
/// `RedisConfig::sentinel`; a missing name is a clear error.
#[tokio::test]
async fn naming_sentinels() {
    let d = sd::shared();
    let config = RedisConfig::new([d.url()]);
    assert_eq!(
        config.deployment().expect("parses"),
        Deployment::Sentinel {
            master: sd::MASTER.into()
        }
    );
    let urls: Vec<String> = d.sentinels.iter().map(|s| s.url.clone()).collect();
    let locker = RedisLocker::connect(
        RedisConfig::sentinel(urls, sd::MASTER)
            .with_prefix(rs::unique_prefix("named"))
            .with_data_loss_wait(Duration::ZERO),
        false,
    )
    .await
    .expect("connect");
    take(&locker, &Key::from("a"))
        .await
        .unlock()
        .await
        .expect("unlock");
    let nameless = d.url().replace(&format!("/{}", sd::MASTER), "");
    let err = RedisLocker::connect(RedisConfig::new([nameless]), false)
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("names no master"), "{err}");
    let unknown = d.url().replace(sd::MASTER, "nosuchmaster");
    let err = RedisLocker::connect(
        RedisConfig::new([unknown]).with_connect_timeout(Duration::from_secs(2)),
        false,
    )
    .await
    .err()
    .expect("no such master");
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
}
