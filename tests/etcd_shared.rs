//! Read/write locks and semaphores on etcd, beyond the conformance suite
//! (which tests/etcd.rs runs, with its checks of them): status, a holder
//! whose lease ends, fenced txns, and a key used as two kinds of lock.
//! Tests start their own etcd (see tests/support).

mod support;

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Txn, TxnOp};
use fairlock::conformance::patient;
use fairlock::etcd::{EtcdConfig, EtcdLocker, FencedTxn};
use fairlock::{Error, Key, LockKind, Locker};

async fn locker(prefix: &str) -> EtcdLocker {
    let config = EtcdConfig::new([support::shared().endpoint.clone()])
        .with_prefix(prefix)
        .with_ttl(Duration::from_secs(2));
    EtcdLocker::connect(config, true).await.expect("connect")
}

async fn wait_in_line(prefix: &str, key: &str, n: i64) {
    let mut client = support::shared().client().await;
    let line = format!("{prefix}{key}/_OWNERS_/");
    support::wait_for_count(&mut client, &line, n, false).await;
}

async fn wait_in_line_at_most(prefix: &str, key: &str, n: i64) {
    let mut client = support::shared().client().await;
    let line = format!("{prefix}{key}/_OWNERS_/");
    support::wait_for_count(&mut client, &line, n, true).await;
}

/// `status` lists a semaphore's and a read/write lock's holders and
/// waiters, told apart by the rule they are granted by, and none of their
/// entries as someone else's.
#[tokio::test]
async fn status_lists_holders_and_waiters() {
    let prefix = support::unique_prefix("shared-status");
    let (a, b, c) = (
        locker(&prefix).await,
        locker(&prefix).await,
        locker(&prefix).await,
    );
    let sem = Key::from("sem");
    let one = a
        .acquire_permits(&patient(), &sem, 1, 2)
        .await
        .expect("acquire");
    let two = b
        .acquire_permits(&patient(), &sem, 1, 2)
        .await
        .expect("acquire");
    let waiter = {
        let (c, sem) = (c.clone(), sem.clone());
        tokio::spawn(async move { c.acquire_permits(&patient(), &sem, 1, 2).await })
    };
    wait_in_line(&prefix, "sem", 3).await;
    let rw = Key::from("rw");
    let r1 = a.read_lock(&patient(), &rw).await.expect("read");
    let r2 = b.read_lock(&patient(), &rw).await.expect("read");
    let writer = {
        let (c, rw) = (c.clone(), rw.clone());
        tokio::spawn(async move { c.write_lock(&patient(), &rw).await })
    };
    wait_in_line(&prefix, "rw", 3).await;

    let locks = a.status(None).await.expect("status");
    let find = |k: &str| locks.iter().find(|l| l.key == k).expect("listed");
    let s = find("sem");
    assert_eq!(s.kind, LockKind::Semaphore { limit: 2 });
    assert_eq!(s.holders.len(), 2);
    assert_eq!(s.waiters.len(), 1);
    assert!(s.foreign.is_empty(), "{:?}", s.foreign);
    assert_eq!(
        s.holder.as_ref().map(|h| h.fencing_token),
        Some(one.fencing_token())
    );
    assert!(s.holders.iter().all(|h| h.ttl_left.is_some()));
    let r = find("rw");
    assert_eq!(r.kind, LockKind::ReadWrite);
    assert_eq!(r.holders.len(), 2);
    assert!(r.holders.iter().all(|h| h.reads));
    assert_eq!(r.waiters.len(), 1);
    assert!(!r.waiters[0].reads, "the waiter writes");
    assert!(r.foreign.is_empty(), "{:?}", r.foreign);

    for g in [one, two, r1, r2] {
        g.unlock().await.expect("unlock");
    }
    waiter
        .await
        .expect("task")
        .expect("granted")
        .unlock()
        .await
        .expect("unlock");
    writer
        .await
        .expect("task")
        .expect("granted")
        .unlock()
        .await
        .expect("unlock");
    let mut client = support::shared().client().await;
    support::wait_for_count(&mut client, &prefix, 0, true).await;
}

/// A permit holder whose session lease ends (revoked here, as when its
/// process dies and the lease expires) is told it lost the permit, and
/// the waiter behind it holds: nobody touched it, so its patience found
/// out. Its token is above the lost holder's.
#[tokio::test]
async fn a_holder_whose_lease_ends_lets_the_next_in() {
    let prefix = support::unique_prefix("shared-lapse");
    let (a, b) = (locker(&prefix).await, locker(&prefix).await);
    let key = Key::from("k");
    let held = a
        .acquire_permits(&patient(), &key, 1, 1)
        .await
        .expect("acquire");
    let waiter = {
        let (b, key) = (b.clone(), key.clone());
        tokio::spawn(async move { b.acquire_permits(&patient(), &key, 1, 1).await })
    };
    wait_in_line(&prefix, "k", 2).await;
    let lease = a.session_lease().await.expect("a lease");
    let mut client = support::shared().client().await;
    client.lease_revoke(lease).await.expect("revoke");
    held.lost().await;
    let next = waiter
        .await
        .expect("task")
        .expect("granted after the lease ended");
    assert!(next.fencing_token() > held.fencing_token());
    let err = held.unlock().await.expect_err("lost");
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    next.unlock().await.expect("unlock");
}

/// etcd issue 16221's case: a waiter whose session lease ends while it
/// waits (its entry goes with it) is never counted as holding: once the
/// writer ahead leaves it gets `SessionLost`, not a read lock, and a
/// later reader is granted normally.
#[tokio::test]
async fn a_waiter_whose_lease_ends_never_holds() {
    let prefix = support::unique_prefix("shared-16221");
    let (a, b, c) = (
        locker(&prefix).await,
        locker(&prefix).await,
        locker(&prefix).await,
    );
    let key = Key::from("k");
    let writing = a.write_lock(&patient(), &key).await.expect("write lock");
    let waiter = {
        let (b, key) = (b.clone(), key.clone());
        tokio::spawn(async move { b.read_lock(&patient(), &key).await })
    };
    wait_in_line(&prefix, "k", 2).await;
    let lease = b.session_lease().await.expect("the waiter's lease");
    let mut client = support::shared().client().await;
    client.lease_revoke(lease).await.expect("revoke");
    wait_in_line_at_most(&prefix, "k", 1).await;
    writing.unlock().await.expect("unlock");
    match waiter.await.expect("task") {
        // It names the caller's key, as a mutex's waiter does.
        Err(Error::SessionLost { key, .. }) => assert_eq!(key, "k"),
        Ok(_) => panic!("a waiter whose lease ended was granted the read lock"),
        Err(e) => panic!("{e}"),
    }
    let reading = c.try_read_lock(&key).await.expect("try").expect("free");
    reading.unlock().await.expect("unlock");
}

/// A fenced txn of a write lock's guard applies while it holds, and not
/// once its entry is gone.
#[tokio::test]
async fn fenced_txn_of_a_write_lock() {
    let prefix = support::unique_prefix("shared-fence");
    let a = locker(&prefix).await;
    let guard = a
        .write_lock(&patient(), &Key::from("k"))
        .await
        .expect("write");
    let put = |v: &str| Txn::new().and_then([TxnOp::put(format!("{prefix}data"), v, None)]);
    guard
        .fenced_txn(put("1"))
        .await
        .expect("applied while held");
    let lease = a.session_lease().await.expect("a lease");
    let mut client = support::shared().client().await;
    client.lease_revoke(lease).await.expect("revoke");
    let err = guard
        .fenced_txn(put("2"))
        .await
        .expect_err("refused once lost");
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    let data = client
        .get(format!("{prefix}data"), None)
        .await
        .expect("get");
    assert_eq!(data.kvs()[0].value(), b"1");
    client
        .delete(format!("{prefix}data"), None)
        .await
        .expect("delete");
}

/// A semaphore of a key held as a mutex, or a permit of another limit, is
/// refused with an error that says so; a read lock of a mutex's key waits
/// (until its context ends, leaving nothing behind); nothing is left.
#[tokio::test]
async fn a_semaphore_key_is_one_kind_of_lock() {
    let prefix = support::unique_prefix("shared-kinds");
    let (a, b) = (Arc::new(locker(&prefix).await), locker(&prefix).await);
    let key = Key::from("k");
    let mutex = a.lock(&patient(), &key).await.expect("lock");
    let err = b
        .acquire_permits(&patient(), &key, 1, 2)
        .await
        .map(drop)
        .expect_err("a mutex");
    assert!(matches!(err, Error::InvalidKey { .. }), "{err}");
    // The mutex stands for a write lock here (etcd tells them apart only
    // by reading more).
    assert!(err.to_string().contains("in use as a write lock"), "{err}");
    let short = fairlock::Context::background().with_timeout(std::time::Duration::from_millis(100));
    let err = b
        .read_lock(&short, &key)
        .await
        .map(drop)
        .expect_err("waits");
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    mutex.unlock().await.expect("unlock");
    // And the other way: a mutex of a key held as a read lock.
    let read = a.read_lock(&patient(), &key).await.expect("read lock");
    match b.try_lock(&key).await {
        Ok(None) | Err(Error::InvalidKey { .. }) => {}
        Ok(Some(_)) => panic!("the mutex of a key held by a reader was granted"),
        Err(e) => panic!("{e}"),
    }
    read.unlock().await.expect("unlock");
    let permit = a
        .acquire_permits(&patient(), &key, 1, 3)
        .await
        .expect("acquire");
    let err = b
        .try_acquire_permits(&key, 1, 2)
        .await
        .map(drop)
        .expect_err("another limit");
    assert!(err.to_string().contains("limit 3"), "{err}");
    permit.unlock().await.expect("unlock");
    let mut client = support::shared().client().await;
    assert_eq!(support::count_keys(&mut client, &prefix).await, 0);
}
