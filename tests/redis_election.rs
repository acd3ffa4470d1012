//! Leader election on Redis, against real servers the tests start (see
//! tests/support): the conformance suite's election checks on one
//! redis-server and on a Redis Cluster, and what only Redis shows (the
//! record a leader writes, a leader whose lock is taken from it, data
//! fairlock did not write in the record's place, Redlock refusing).
#![cfg(feature = "redis")]

mod support;

use std::time::Duration;

use fairlock::conformance::{ElectionBackend, patient};
use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{Elector, Error, Key, Locker};
use support::redis_backend::RedisBackend as Redis;
use support::redis_cluster as rc;
use support::redis_server as rs;

async fn on(urls: Vec<String>, test: &str, ttl: Duration) -> Redis {
    let config = RedisConfig::new(urls)
        .with_prefix(rs::unique_prefix(test))
        .with_data_loss_wait(Duration::ZERO)
        .with_ttl(ttl);
    Redis::connect(config).await
}

async fn redis(test: &str) -> Redis {
    on(
        vec![rs::shared().url.clone()],
        test,
        Duration::from_secs(10),
    )
    .await
}

fairlock::election_conformance_tests!(redis);

mod on_a_cluster {
    use super::*;

    async fn cluster(test: &str) -> Redis {
        let c = rc::shared();
        let config = RedisConfig::new([c.url()])
            .with_prefix(rs::unique_prefix(test))
            .with_data_loss_wait(Duration::ZERO)
            .with_ttl(Duration::from_secs(10));
        let base = RedisLocker::connect(config, false).await.expect("connect");
        Redis::cluster(base, c.master_urls().await).await
    }

    fairlock::election_conformance_tests!(cluster);
}

async fn get(r: &Redis, key: &str) -> Option<Vec<u8>> {
    r.query(redis::cmd("GET").arg(key)).await
}

/// The record a leader writes: `<term> <n> <owner> since=..\n<value>`
/// beside the lock key, with a TTL; `status` lists the election as its
/// lock, held by the leader, with the candidate in line and nothing
/// foreign.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_and_status_of_an_election() {
    let r = redis("el-record").await;
    let name = Key::from("web");
    let elector = r.base.elector();
    let leadership = elector
        .campaign(&patient(), &name, b"10.0.0.7:80")
        .await
        .expect("campaign");
    let record_key = format!("{}/_OWNERS_/leader", r.lock_key(&name));
    let record = get(&r, &record_key).await.expect("the record");
    let text = String::from_utf8_lossy(&record);
    assert!(
        text.starts_with(&format!("{:020} {:010} ", leadership.fencing_token(), 1)),
        "{text}"
    );
    assert!(text.ends_with("\n10.0.0.7:80"), "{text}");
    let ttl: i64 = r.query(redis::cmd("PTTL").arg(&record_key)).await;
    assert!(ttl > 0, "the record must expire: {ttl}");
    let candidate = r.base.elector();
    let waiting = {
        let (candidate, name) = (candidate.clone(), name.clone());
        tokio::spawn(async move { candidate.campaign(&patient(), &name, b"c").await })
    };
    r.wait_candidates(&name, 1).await;
    let status = r.base.status(Some(&name)).await.expect("status");
    assert_eq!(status.len(), 1, "{status:?}");
    let holder = status[0]
        .holder
        .as_ref()
        .expect("the leader holds the lock");
    assert_eq!(holder.fencing_token, leadership.fencing_token());
    assert_eq!(status[0].waiters.len(), 1, "{status:?}");
    assert!(status[0].foreign.is_empty(), "{status:?}");
    let shown = status[0].leader.as_ref().expect("status names the leader");
    assert_eq!(
        (shown.value.as_slice(), shown.fencing_token),
        (&b"10.0.0.7:80"[..], leadership.fencing_token())
    );
    leadership.resign().await.expect("resign");
    let next = waiting.await.expect("join").expect("elected");
    let now = elector
        .leader(&name)
        .await
        .expect("leader")
        .expect("a leader");
    assert_eq!(
        (now.value.as_slice(), now.fencing_token),
        (&b"c"[..], next.fencing_token())
    );
    next.resign().await.expect("resign");
    ElectionBackend::finish(&r).await;
}

/// A leader whose lock key is deleted behind its back (as when it
/// expired during a pause): its proclaim is refused with `LockLost`, it
/// is told it lost, the waiting candidate is elected, and an observer
/// goes from the old leader to the new one (possibly through nobody),
/// never back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lock_is_taken_is_deposed() {
    // A TTL long enough that the old leader's watchdog has not noticed
    // yet when it proclaims: Redis itself must refuse the write.
    let r = on(
        vec![rs::shared().url.clone()],
        "el-deposed",
        Duration::from_secs(30),
    )
    .await;
    let name = Key::from("e");
    let (a, b) = (r.base.elector(), r.base.elector());
    let first = a.campaign(&patient(), &name, b"a").await.expect("campaign");
    let mut watch = b.observe(&name).await.expect("observe");
    assert_eq!(
        watch.next().await.expect("state").map(|l| l.value),
        Some(b"a".to_vec())
    );
    let second = {
        let (b, name) = (b.clone(), name.clone());
        tokio::spawn(async move { b.campaign(&patient(), &name, b"b").await })
    };
    r.wait_candidates(&name, 1).await;
    let () = r.query(redis::cmd("DEL").arg(r.lock_key(&name))).await;
    let second = second.await.expect("join").expect("elected");
    assert!(second.fencing_token() > first.fencing_token());
    assert!(first.is_held(), "the old leader has not noticed yet");
    let refused = first
        .proclaim(b"late")
        .await
        .expect_err("a deposed proclaim");
    assert!(matches!(refused, Error::LockLost { .. }), "{refused}");
    first.lost().await;
    loop {
        let state = tokio::time::timeout(Duration::from_secs(60), watch.next())
            .await
            .expect("a change")
            .expect("state");
        match state {
            None => continue,
            Some(l) if l.value == b"b" => {
                assert_eq!(l.fencing_token, second.fencing_token());
                break;
            }
            Some(l) => panic!("an observer went back to {l:?}"),
        }
    }
    drop(first);
    second.resign().await.expect("resign");
    ElectionBackend::wait_clean(&r).await;
    ElectionBackend::finish(&r).await;
}

/// A record key of another type in the record's place: the campaign
/// fails naming the key and the `DEL` that removes it, and leaves the
/// line; the key is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_record_fails_the_campaign_naming_it() {
    let r = redis("el-foreign").await;
    let name = Key::from("e");
    let record_key = format!("{}/_OWNERS_/leader", r.lock_key(&name));
    let () = r.query(redis::cmd("SADD").arg(&record_key).arg("x")).await;
    let err = r
        .base
        .elector()
        .campaign(&patient(), &name, b"v")
        .await
        .expect_err("a foreign record");
    let text = support::chain(&err);
    assert!(
        text.contains(&format!("redis-cli DEL '{record_key}'"))
            && text.contains("where fairlock keeps an election's leader record"),
        "{text}"
    );
    let kind: String = r.query(redis::cmd("TYPE").arg(&record_key)).await;
    assert_eq!(kind, "set");
    let () = r.query(redis::cmd("DEL").arg(&record_key)).await;
    ElectionBackend::finish(&r).await;
}

/// Redlock refuses elections, saying what to use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_refuses_elections() {
    let urls: Vec<String> = rs::shared_five()[..3]
        .iter()
        .map(|s| s.url.clone())
        .collect();
    let r = on(urls, "el-redlock", Duration::from_secs(10)).await;
    let err = r
        .base
        .campaign(&patient(), &Key::from("e"), b"v".to_vec())
        .await
        .expect_err("Redlock");
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    assert!(err.to_string().contains("single Redis instance"), "{err}");
    let err = r.base.leader(&Key::from("e")).await.expect_err("Redlock");
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
}
