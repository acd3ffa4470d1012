//! Lost locks on etcd, against real etcd servers the tests start: a lock
//! taken away, a session lease revoked or expired, etcd stalled or gone,
//! a paused holder; and fenced txns, which apply only while the lock is
//! held.

mod support;

use std::process::Command;
use std::time::Duration;

use etcd_client::{GetOptions, Txn, TxnOp};
use fairlock::conformance::{Backend, patient};
use fairlock::etcd::{EtcdConfig, EtcdLocker, FencedTxn};
use fairlock::{Error, Key, Locker};
use support::etcd_backend::EtcdBackend as Etcd;

async fn etcd(test: &str) -> Etcd {
    Etcd::on_shared(test).await
}

/// A waiter whose etcd goes away gets an error, not an endless wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_going_away_mid_wait_is_an_error() {
    for fair in [true, false] {
        let server = support::Etcd::start();
        let config = EtcdConfig::new([server.endpoint.clone()])
            .with_prefix(support::unique_prefix("gone"))
            .with_request_timeout(Duration::from_secs(2));
        let holder = EtcdLocker::connect(config.clone(), fair)
            .await
            .expect("connect");
        let waiter = EtcdLocker::connect(config.clone(), fair)
            .await
            .expect("connect");
        let key = Key::from("k");
        let _held = holder
            .try_lock(&key)
            .await
            .expect("try_lock")
            .expect("free");
        let wait = {
            let key = key.clone();
            tokio::spawn(async move { waiter.lock(&patient(), &key).await })
        };
        if fair {
            let mut client = server.client().await;
            support::wait_for_count(
                &mut client,
                &format!("{}k/_OWNERS_/", config.prefix()),
                1,
                false,
            )
            .await;
        } else {
            tokio::task::yield_now().await;
        }
        server.stop();
        let err = wait.await.expect("task").expect_err("etcd is gone");
        assert!(!err.is_gave_up(), "{err}");
        assert!(err.to_string().contains("etcd"), "{err}");
    }
}

/// A guard whose lock was taken away reports `LockLost` on unlock and does
/// not delete the new holder's key.
#[tokio::test]
async fn unlock_after_loss_reports_it_and_spares_the_new_holder() {
    let b = etcd("lost").await;
    let key = Key::from("k");
    let first = EtcdLocker::from_client(b.client.clone(), b.config.clone(), true);
    let guard = first.try_lock(&key).await.expect("try_lock").expect("free");
    let lost = guard.lost_token();
    // Simulate lease expiry: revoke the first locker's lease behind its back.
    let lease = first.lease_id().await.expect("lease");
    b.client.clone().lease_revoke(lease).await.expect("revoke");
    tokio::time::timeout(Duration::from_secs(120), lost.cancelled())
        .await
        .expect("the loss signal never fired");
    // The key went with the lease: the cause is the lease, not a deletion.
    assert_eq!(guard.loss_cause(), Some(fairlock::LossCause::LeaseEnded));
    let second = b.locker(false);
    let new_guard = second
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("free after revoke");
    let err = guard.unlock().await.expect_err("lost");
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    let lock_key = format!("{}k", b.config.prefix());
    let still = b.client.clone().get(lock_key, None).await.expect("get");
    assert_eq!(still.kvs().len(), 1, "the new holder's key must survive");
    assert!(new_guard.fencing_token() > 0);
    new_guard.unlock().await.expect("unlock");
    b.wait_clean().await;
}

/// A fair grantee keeps its queue key while it holds. If its lock key is
/// taken away (here deleted by hand, its lease still alive), its unlock
/// reports `LockLost` and still removes that queue key: left behind, it
/// would sit at the head of the queue for as long as the lease lives.
#[tokio::test]
async fn lost_grantee_unlock_removes_its_queue_key() {
    let b = etcd("lost-grantee").await;
    let key = Key::from("k");
    let holder = b.locker(true);
    let held = holder
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("free");
    let grantee = b.locker(true);
    let wait = {
        let (grantee, key) = (grantee.clone(), key.clone());
        tokio::spawn(async move { grantee.lock(&patient(), &key).await })
    };
    b.wait_queued(&key, 1).await;
    held.unlock().await.expect("unlock");
    let guard = wait.await.expect("task").expect("granted");
    let lost = guard.lost_token();
    let lock_key = format!("{}k", b.config.prefix());
    b.client
        .clone()
        .delete(lock_key, None)
        .await
        .expect("delete");
    tokio::time::timeout(Duration::from_secs(120), lost.cancelled())
        .await
        .expect("the loss signal never fired");
    let err = guard.unlock().await.expect_err("lost");
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    let queue = format!("{}k/_OWNERS_/", b.config.prefix());
    let left = b
        .client
        .clone()
        .get(
            queue,
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .expect("get");
    assert!(left.kvs().is_empty(), "queue keys left: {:?}", left.kvs());
}

/// A session lease etcd no longer knows (revoked behind the locker's back)
/// is replaced on the next write, transparently: etcd's "lease not found"
/// is told by its gRPC code.
#[tokio::test]
async fn a_revoked_session_lease_is_replaced_on_the_next_lock() {
    let b = etcd("regrant").await;
    let locker = EtcdLocker::from_client(b.client.clone(), b.config.clone(), true);
    let lease = locker.lease_id().await.expect("lease");
    b.client.clone().lease_revoke(lease).await.expect("revoke");
    let guard = locker
        .try_lock(&Key::from("k"))
        .await
        .expect("a fresh lease is taken")
        .expect("free");
    assert_ne!(locker.lease_id().await.expect("lease"), lease);
    guard.unlock().await.expect("unlock");
    locker.close().await.expect("close");
    b.wait_clean().await;
}

/// A queue entry that vanishes (lease gone) makes the waiter fail rather
/// than wait forever (etcd #19597).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_whose_queue_entry_vanishes_fails() {
    let b = etcd("vanish").await;
    let key = Key::from("k");
    let holder = b.locker(true);
    let _held = holder
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("free");
    let waiter = EtcdLocker::from_client(b.client.clone(), b.config.clone(), true);
    let lease = waiter.lease_id().await.expect("lease");
    let wait = {
        let (waiter, key) = (waiter.clone(), key.clone());
        tokio::spawn(async move { waiter.lock(&patient(), &key).await })
    };
    b.wait_queued(&key, 1).await;
    b.client.clone().lease_revoke(lease).await.expect("revoke");
    let err = wait.await.expect("task").expect_err("queue entry vanished");
    assert!(matches!(err, Error::SessionLost { .. }), "{err}");
    let queue = format!("{}k/_OWNERS_/", b.config.prefix());
    let left = b
        .client
        .clone()
        .get(queue, Some(GetOptions::new().with_prefix()))
        .await
        .expect("get");
    assert!(left.kvs().is_empty());
}

/// An unlock that meets an etcd stall keeps trying and frees the lock when
/// etcd answers again, instead of leaving it held for the session's life.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_survives_an_etcd_stall() {
    let server = support::Etcd::start();
    let config = EtcdConfig::new([server.endpoint.clone()])
        .with_prefix(support::unique_prefix("stall"))
        .with_request_timeout(Duration::from_millis(300));
    let a = EtcdLocker::connect(config.clone(), true)
        .await
        .expect("connect");
    let c = EtcdLocker::connect(config.clone(), true)
        .await
        .expect("connect");
    let key = Key::from("k");
    let guard = a.try_lock(&key).await.expect("try_lock").expect("free");
    let pid = server.pid().to_string();
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill {sig} {pid}");
    };
    signal("-STOP");
    let unlock = tokio::spawn(guard.unlock());
    // The fault's length (several request timeouts), not a synchronisation.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    signal("-CONT");
    unlock.await.expect("task").expect("unlock after the stall");
    let again = c
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("freed after the stall");
    again.unlock().await.expect("unlock");
}

/// Fenced txns apply while the lock is held; once the lock key is taken
/// away the guard's loss signal fires and fenced txns are rejected.
#[tokio::test]
async fn fenced_txn_applies_only_while_held() {
    let b = etcd("fenced").await;
    let locker = EtcdLocker::from_client(b.client.clone(), b.config.clone(), true);
    let guard = locker
        .lock(&patient(), &Key::from("k"))
        .await
        .expect("lock");
    assert!(guard.is_held());
    let data = format!("{}data", b.config.prefix());
    let put = |v: &str| Txn::new().and_then([TxnOp::put(data.clone(), v, None)]);
    guard.fenced_txn(put("1")).await.expect("fenced write");
    let lost = guard.lost_token();
    assert!(!lost.is_cancelled());
    // Someone deletes the lock key behind the holder's back.
    let lock_key = format!("{}k", b.config.prefix());
    b.client
        .clone()
        .delete(lock_key, None)
        .await
        .expect("delete");
    tokio::time::timeout(Duration::from_secs(120), lost.cancelled())
        .await
        .expect("the loss signal never fired");
    assert!(!guard.is_held());
    assert_eq!(guard.valid_until(), None, "no deadline once lost");
    assert_eq!(guard.loss_cause(), Some(fairlock::LossCause::KeyChanged));
    guard.lost().await;
    let err = guard.fenced_txn(put("2")).await.expect_err("rejected");
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    let value = b.client.clone().get(data.clone(), None).await.expect("get");
    assert_eq!(value.kvs()[0].value(), b"1");
    let err = guard.unlock().await.expect_err("lost");
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    b.client.clone().delete(data, None).await.expect("cleanup");
    locker.close().await.expect("close");
    b.wait_clean().await;
}

/// A held lock is reported lost once etcd has been unreachable for the TTL.
#[tokio::test]
async fn holder_learns_of_loss_when_etcd_goes_away() {
    let server = support::Etcd::start();
    let config = EtcdConfig::new([server.endpoint.clone()])
        .with_prefix(support::unique_prefix("gone"))
        .with_ttl(Duration::from_secs(2));
    let locker = EtcdLocker::connect(config, true).await.expect("connect");
    let guard = locker
        .lock(&patient(), &Key::from("k"))
        .await
        .expect("lock");
    let lost = guard.lost_token();
    server.stop();
    tokio::time::timeout(Duration::from_secs(120), lost.cancelled())
        .await
        .expect("the loss signal never fired");
    assert!(!guard.is_held());
    assert_eq!(guard.loss_cause(), Some(fairlock::LossCause::Expired));
    let err = tokio::time::timeout(Duration::from_secs(120), guard.unlock())
        .await
        .expect("unlock hung")
        .expect_err("lost");
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
}

/// A healthy holder keeps its lock across several TTLs: each renewal
/// counts (its raft term is confirmed by a later read; see session.rs).
#[tokio::test]
async fn a_held_lock_outlives_its_ttl_while_renewed() {
    let b = etcd("renewed").await;
    let ttl = Duration::from_secs(2);
    let config = b.config.clone().with_ttl(ttl);
    let locker = EtcdLocker::from_client(b.client.clone(), config, true);
    let guard = locker
        .lock(&patient(), &Key::from("k"))
        .await
        .expect("lock");
    let lost = guard.lost_token();
    // The deadline lies within a TTL from now, and renewals move it on.
    let first = guard.valid_until().expect("a deadline while held");
    let now = std::time::Instant::now();
    assert!(
        first > now && first <= now + ttl,
        "{first:?} against {now:?}"
    );
    let held_on = tokio::time::timeout(ttl * 3, lost.cancelled()).await;
    assert!(
        held_on.is_err(),
        "lost while renewed: {:?}",
        guard.loss_cause()
    );
    assert!(guard.is_held());
    let later = guard.valid_until().expect("a deadline while held");
    assert!(
        later >= first + ttl * 2,
        "renewals did not move the deadline on"
    );
    guard.unlock().await.expect("unlock");
    locker.close().await.expect("close");
    b.wait_clean().await;
}

/// A lease kept over a slow link: a renewal and the read that confirms
/// it take two round trips, and each renewal goes a third of the TTL after
/// the last one was sent, not a third of the TTL after it was confirmed
/// (which would space them by the period plus both round trips: here
/// 2 s + 2 s, with a 5.4 s deadline after each send, so the lease lapsed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_link_keeps_the_lease() {
    let b = etcd("slow-link").await;
    let proxy = support::proxy::Proxy::start(
        "127.0.0.1:0".parse().expect("addr"),
        support::shared().endpoint.clone(),
    )
    .await
    .expect("proxy");
    let config = EtcdConfig::new([proxy.addr.to_string()])
        .with_prefix(b.config.prefix())
        .with_ttl(Duration::from_secs(6));
    let locker = EtcdLocker::connect(config, true).await.expect("connect");
    let guard = locker
        .lock(&patient(), &Key::from("k"))
        .await
        .expect("lock");
    // One second per round trip: a confirmed renewal takes two seconds, a
    // third of the TTL.
    proxy.set_delay(Duration::from_millis(500), Duration::ZERO);
    let lost = guard.lost_token();
    let mut seen = guard.valid_until().expect("a deadline while held");
    let mut renewals = 0;
    while renewals < 4 {
        tokio::select! {
            () = lost.cancelled() => panic!(
                "lost after {renewals} renewals over the slow link: {:?}",
                guard.loss_cause()
            ),
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        let now = guard.valid_until().expect("a deadline while held");
        if now > seen {
            renewals += 1;
            seen = now;
        }
    }
    proxy.set_delay(Duration::ZERO, Duration::ZERO);
    guard.unlock().await.expect("unlock");
    locker.close().await.expect("close");
    b.wait_clean().await;
}

/// Fenced etcd txns refuse guards from other backends with a clear error.
#[tokio::test]
async fn fenced_txn_needs_an_etcd_guard() {
    let store = fairlock::memory::MemoryStore::new();
    let guard = store
        .locker(true)
        .try_lock(&Key::from("k"))
        .await
        .expect("try_lock")
        .expect("free");
    assert!(guard.is_held());
    let err = guard.fenced_txn(Txn::new()).await.expect_err("unsupported");
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    assert!(err.to_string().contains("etcd backend"), "{err}");
}
