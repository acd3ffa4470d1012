//! The conformance suite on a real Redis Cluster (three masters with a
//! replica each, started here), locks on different masters, a slot moved
//! under a held lock (`MOVED`), and a master killed under a held lock
//! (failover).
#![cfg(feature = "redis")]

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use fairlock::conformance::{Backend, patient};
use fairlock::redis::{Deployment, RedisConfig, RedisLocker};
use fairlock::{Error, Key, Locker};
use futures_util::StreamExt;
use support::redis_backend::{RedisBackend, take};
use support::redis_cluster::{self as rc, RedisCluster};
use support::redis_server::{self as rs, conn};

async fn on(cluster: &RedisCluster, test: &str, ttl: Duration) -> RedisBackend {
    let config = RedisConfig::new([cluster.url()])
        .with_prefix(rs::unique_prefix(test))
        .with_data_loss_wait(Duration::ZERO)
        .with_ttl(ttl);
    let base = RedisLocker::connect(config, false).await.expect("connect");
    RedisBackend::cluster(base, cluster.master_urls().await).await
}

async fn cluster(test: &str) -> RedisBackend {
    on(rc::shared(), test, Duration::from_secs(10))
        .await
        .with_shared()
}

fairlock::conformance_tests!(cluster);

/// Waits until the lock key at `url` is extended (an `expire` keyspace
/// event: the watchdog's extend ran on that node), or the guard is lost;
/// `true` if extended.
async fn extended_or_lost(url: &str, lock_key: &str, guard: &fairlock::LockGuard) -> bool {
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
            () = guard.lost() => false,
        }
    })
    .await
    .expect("neither an extend nor a loss within 120 s")
}

/// Locks whose keys hash to slots of different masters are all granted at
/// once, each key's keys in one slot, and `status` finds them on every
/// master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_spread_over_masters() {
    let c = rc::shared();
    let r = on(c, "spread", Duration::from_secs(10)).await;
    let mut guards = Vec::new();
    let mut owners = BTreeSet::new();
    for i in 0..12 {
        let key = Key::from(format!("k{i}"));
        let guard = take(&r.base, &key).await;
        let slot = c.slot(&r.lock_key(&key)).await;
        assert_eq!(slot, c.slot(&r.queue(&key)).await, "one slot per lock");
        owners.insert(c.owner(slot).await.port);
        guards.push(guard);
    }
    assert!(owners.len() >= 2, "all 12 locks on one master: {owners:?}");
    let listed = r.base.status(None).await.expect("status");
    assert_eq!(listed.len(), 12, "{listed:?}");
    for g in guards {
        g.unlock().await.expect("unlock");
    }
    assert!(r.base.status(None).await.expect("status").is_empty());
    r.finish().await;
}

/// Tokens grow strictly per key, from the key's own counter in its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_grow_per_key() {
    let r = cluster("tokens").await;
    let lockers = [r.base.locker(true), r.base.locker(false)];
    let mut last = [0u64; 3];
    for i in 0..18 {
        let key = Key::from(format!("k{}", i % 3));
        let g = take(&lockers[i % 2], &key).await;
        assert!(g.fencing_token() > last[i % 3], "{}", g.fencing_token());
        last[i % 3] = g.fencing_token();
        g.unlock().await.expect("unlock");
    }
    r.finish().await;
}

/// `lock_all` takes keys of one hash slot only: keys of different slots
/// are refused before any request, in both modes, saying how to fix it
/// (a common hash tag); keys that start with the same `{tag}` share a slot
/// and are taken together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_all_takes_keys_of_one_slot_only() {
    let c = rc::shared();
    let r = cluster("all-slots").await;
    let apart = [Key::from("a"), Key::from("b")];
    assert_ne!(
        c.slot(&r.lock_key(&apart[0])).await,
        c.slot(&r.lock_key(&apart[1])).await
    );
    for fair in [true, false] {
        let locker = r.base.locker(fair);
        for err in [
            locker.lock_all(&patient(), &apart).await.map(drop),
            locker.try_lock_all(&apart).await.map(drop),
        ] {
            let err = err.expect_err("refused");
            assert!(matches!(err, Error::Unsupported(_)), "{err}");
            let text = err.to_string();
            assert!(
                text.contains("different hash slots") && text.contains("{orders}/17"),
                "{text}"
            );
        }
    }
    assert!(r.is_clean().await, "a refused lock_all left keys behind");
    let together = [Key::from("{orders}/17"), Key::from("{orders}/42")];
    let slot = c.slot(&r.lock_key(&together[0])).await;
    assert_eq!(slot, c.slot(&r.lock_key(&together[1])).await);
    let both = r
        .base
        .locker(true)
        .lock_all(&patient(), &together)
        .await
        .expect("lock_all of one slot");
    for key in &together {
        assert!(r.base.try_lock(key).await.expect("try_lock").is_none());
    }
    both.unlock().await.expect("unlock");
    r.finish().await;
}

/// Moves the slot of `lock_key` from its master to another with
/// `CLUSTER SETSLOT ... IMPORTING / MIGRATING`, `MIGRATE` and `SETSLOT
/// NODE`, as `redis-cli --cluster reshard` does; returns the new owner's
/// port.
async fn move_slot(c: &RedisCluster, lock_key: &str) -> u16 {
    let slot = c.slot(lock_key).await;
    let from = c.owner(slot).await;
    let masters: Vec<_> = RedisCluster::topology(&c.nodes[0].url)
        .await
        .into_iter()
        .filter(|n| n.master)
        .collect();
    let to = masters
        .iter()
        .find(|n| n.id != from.id)
        .expect("another master")
        .clone();
    let url = |port: u16| format!("redis://127.0.0.1:{port}");
    let setslot = |port: u16, args: Vec<String>| async move {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(slot).arg(args);
        let () = cmd
            .query_async(&mut conn(&url(port)).await)
            .await
            .expect("setslot");
    };
    setslot(to.port, vec!["IMPORTING".into(), from.id.clone()]).await;
    setslot(from.port, vec!["MIGRATING".into(), to.id.clone()]).await;
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query_async(&mut conn(&url(from.port)).await)
            .await
            .expect("getkeysinslot");
        if keys.is_empty() {
            break;
        }
        let () = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(to.port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys)
            .query_async(&mut conn(&url(from.port)).await)
            .await
            .expect("migrate");
    }
    for n in std::iter::once(&to).chain(masters.iter().filter(|n| n.id != to.id)) {
        setslot(n.port, vec!["NODE".into(), to.id.clone()]).await;
    }
    to.port
}

/// A held lock whose slot moves to another master: the watchdog's next
/// extend is answered `MOVED` and follows it, the lock stays held, a
/// waiter queued before the move gets it on release, and tokens go on
/// growing from the counter that moved with the slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_slot_is_followed() {
    let c = RedisCluster::start();
    let r = on(&c, "moved", Duration::from_secs(3)).await;
    let key = Key::from("k");
    let guard = take(&r.base, &key).await;
    let waiter = {
        let (l, k) = (r.base.locker(true), key.clone());
        tokio::spawn(async move { l.lock(&patient(), &k).await })
    };
    r.wait_queued(&key, 1).await;
    let to = move_slot(&c, &r.lock_key(&key)).await;
    assert!(
        extended_or_lost(
            &format!("redis://127.0.0.1:{to}"),
            &r.lock_key(&key),
            &guard
        )
        .await,
        "the lock was lost when its slot moved"
    );
    assert!(guard.is_held());
    let first = guard.fencing_token();
    guard.unlock().await.expect("unlock after the move");
    let next = waiter.await.expect("task").expect("waiter granted");
    assert!(next.fencing_token() > first);
    next.unlock().await.expect("unlock");
    r.wait_clean().await;
    r.finish().await;
}

/// A master killed while a lock in its slots is held: its replica takes
/// over, and the holder keeps the lock only if the new master has its key
/// (else it is told the lock is lost); new locks work on the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_under_a_held_lock() {
    let c = RedisCluster::start();
    let r = on(&c, "failover", Duration::from_secs(10)).await;
    let key = Key::from("k");
    let lock_key = r.lock_key(&key);
    let guard = take(&r.base, &key).await;
    let slot = c.slot(&lock_key).await;
    let old = c.owner(slot).await;
    let replica = RedisCluster::topology(&c.nodes[0].url)
        .await
        .into_iter()
        .find(|n| n.master_id.as_deref() == Some(old.id.as_str()))
        .expect("a replica of the lock's master");
    let replica_url = format!("redis://127.0.0.1:{}", replica.port);
    c.server(old.port).stop();
    rc::wait_for(&replica_url, &["INFO", "replication"], |info| {
        info.contains("role:master")
    })
    .await;
    let held = extended_or_lost(&replica_url, &lock_key, &guard).await;
    let value: Option<String> = redis::cmd("GET")
        .arg(&lock_key)
        .query_async(&mut conn(&replica_url).await)
        .await
        .expect("get");
    let ours = value.is_some_and(|v| v.starts_with(&format!("{} ", guard.fencing_token())));
    assert_eq!(
        held, ours,
        "held: {held}, the new master has our key: {ours}"
    );
    let other = Key::from("k2");
    let g = r
        .base
        .locker(false)
        .lock(&patient(), &other)
        .await
        .expect("new lock");
    g.unlock().await.expect("unlock");
    match guard.unlock().await {
        Ok(()) => assert!(held),
        Err(e) => assert!(!held && matches!(e, Error::LockLost { .. }), "{e}"),
    }
}

/// A cluster is named by `redis+cluster://`, or by `RedisConfig::cluster`;
/// bad names are clear errors.
#[tokio::test]
async fn naming_a_cluster() {
    let c = rc::shared();
    let config = RedisConfig::new([c.url()]);
    assert_eq!(config.deployment().expect("parses"), Deployment::Cluster);
    let seeds = vec![c.nodes[2].url.clone()];
    let locker = RedisLocker::connect(
        RedisConfig::cluster(seeds)
            .with_prefix(rs::unique_prefix("named"))
            .with_data_loss_wait(Duration::ZERO),
        true,
    )
    .await
    .expect("connect through one seed");
    take(&locker, &Key::from("a"))
        .await
        .unlock()
        .await
        .expect("unlock");
    let err = locker
        .try_lock(&Key::from("}a"))
        .await
        .expect_err("bad key");
    assert!(matches!(err, Error::InvalidKey { .. }), "{err}");
    for (urls, says) in [
        (vec![c.url(), c.nodes[0].url.clone()], "scheme of its own"),
        (vec![c.nodes[0].url.clone(), c.url()], "mixed with plain"),
    ] {
        let err = RedisLocker::connect(RedisConfig::new(urls), false)
            .await
            .err()
            .expect("refused");
        assert!(
            matches!(err, Error::InvalidConfig(_)) && err.to_string().contains(says),
            "{err}"
        );
    }
    let port = support::free_port();
    let err = RedisLocker::connect(
        RedisConfig::new([format!("redis+cluster://127.0.0.1:{port}")])
            .with_connect_timeout(Duration::from_secs(1)),
        false,
    )
    .await
    .err()
    .expect("nothing listens");
    assert!(matches!(err, Error::Connect { .. }), "{err}");
}
