//! The checks of read/write locks and semaphores (see
//! [`Locker::read_lock`](crate::Locker::read_lock) and
//! [`Locker::acquire_permits`](crate::Locker::acquire_permits)): who holds together, in
//! which order, and that giving up leaves nothing behind.

use std::sync::{Arc, Mutex};

use super::Backend;
use super::common::{assert_err, patient, refused, short, spawn};
use super::permits::{most_held, several_permits};
use crate::{Context, Error, Key};

/// What the tasks of a check did, in order.
type Log = Arc<Mutex<Vec<&'static str>>>;

fn log(log: &Log, what: &'static str) {
    log.lock().unwrap_or_else(|e| e.into_inner()).push(what);
}

fn logged(log: &Log) -> Vec<&'static str> {
    log.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Readers hold together; a writer waits for the readers ahead of it and
/// holds alone; a reader that comes after a waiting writer waits behind it
/// (no barging past a writer, so writers do not starve); tokens grow with
/// every grant.
///
/// Returns at once when [`Backend::supports_shared`] is `false`.
///
/// # Panics
/// When a grant breaks these rules, or a call fails.
pub async fn read_write_lock(b: &impl Backend) {
    if !b.supports_shared() {
        return;
    }
    let key = Key::from("rw");
    let lockers: Vec<_> = (0..5).map(|_| b.locker(true)).collect();
    let r1 = lockers[0].read_lock(&patient(), &key).await.expect("read");
    let r2 = lockers[1].read_lock(&patient(), &key).await.expect("share");
    let held = refused(lockers[2].try_write_lock(&key)).await;
    assert!(held, "a writer took the lock from two readers");
    let order: Log = Arc::default();
    let o = Arc::clone(&order);
    let writer = spawn(&lockers[2], &key, |locker, key| async move {
        let guard = locker.write_lock(&patient(), &key).await.expect("write");
        log(&o, "writer");
        guard
    });
    b.wait_queued(&key, 3).await;
    let held = refused(lockers[3].try_read_lock(&key)).await;
    assert!(held, "a reader went past a waiting writer");
    let o = Arc::clone(&order);
    let late_reader = spawn(&lockers[3], &key, |locker, key| async move {
        let guard = locker.read_lock(&patient(), &key).await.expect("read");
        log(&o, "late reader");
        guard
    });
    b.wait_queued(&key, 4).await;
    let tokens = [r1.fencing_token(), r2.fencing_token()];
    r1.unlock().await.expect("unlock");
    let early = logged(&order);
    assert!(early.is_empty(), "granted while a reader held: {early:?}");
    r2.unlock().await.expect("unlock");
    let w = writer.await.expect("writer task");
    assert_eq!(logged(&order), ["writer"], "the writer holds alone");
    assert!(tokens.iter().all(|&t| w.fencing_token() > t), "tokens grow");
    let held = refused(lockers[4].try_read_lock(&key)).await;
    assert!(held, "a reader held beside the writer");
    w.unlock().await.expect("unlock");
    let late = late_reader.await.expect("reader task");
    assert_eq!(logged(&order), ["writer", "late reader"]);
    assert!(late.fencing_token() > tokens[1], "tokens grow");
    late.unlock().await.expect("unlock");
    b.wait_clean().await;
    b.finish().await;
}

/// A semaphore with limit 2: two hold, the third waits until one leaves,
/// waiters are granted in arrival order, and under load never more than
/// two hold at once.
///
/// Returns at once when [`Backend::supports_shared`] is `false`.
///
/// # Panics
/// When more than the limit hold, the order is broken, or a call fails.
pub async fn semaphore(b: &impl Backend) {
    if !b.supports_shared() {
        return;
    }
    const LIMIT: u32 = 2;
    let key = Key::from("sem");
    let lockers: Vec<_> = (0..4).map(|_| b.locker(true)).collect();
    let one = lockers[0].try_acquire_permits(&key, 1, LIMIT).await;
    let one = one.expect("try").expect("free");
    let two = lockers[1].acquire_permits(&patient(), &key, 1, LIMIT).await;
    let two = two.expect("second permit");
    let held = refused(lockers[2].try_acquire_permits(&key, 1, LIMIT)).await;
    assert!(held, "a third permit of two");
    let order: Log = Arc::default();
    let mut waiters = Vec::new();
    for (i, name) in [(2, "third"), (3, "fourth")] {
        let order = Arc::clone(&order);
        waiters.push(spawn(&lockers[i], &key, move |locker, k| async move {
            let guard = locker.acquire_permits(&patient(), &k, 1, LIMIT).await;
            let guard = guard.expect("acquire");
            log(&order, name);
            guard
        }));
        b.wait_queued(&key, i + 1).await;
    }
    one.unlock().await.expect("unlock");
    let mut waiters = waiters.into_iter();
    let third = waiters.next().expect("third").await.expect("task");
    let first = logged(&order);
    assert_eq!(first, ["third"], "one permit freed, one granted, in order");
    two.unlock().await.expect("unlock");
    let fourth = waiters.next().expect("fourth").await.expect("task");
    assert_eq!(logged(&order), ["third", "fourth"]);
    assert!(
        fourth.fencing_token() > third.fencing_token(),
        "tokens grow"
    );
    third.unlock().await.expect("unlock");
    fourth.unlock().await.expect("unlock");

    // Under load: never more than the limit at once.
    let most = most_held(b, &key, LIMIT, (5, 4), |_, _| 1).await;
    assert!(most <= LIMIT as usize, "{most} held a semaphore of {LIMIT}");
    several_permits(b).await;
    b.wait_clean().await;
    b.finish().await;
}

/// Read locks, write locks and permits that give up (deadline, cancel,
/// dropped future) leave nothing behind and let the next caller in; a
/// dropped guard releases.
///
/// Returns at once when [`Backend::supports_shared`] is `false`.
///
/// # Panics
/// When something is left behind or a later call is not granted.
pub async fn shared_giving_up_leaves_nothing(b: &impl Backend) {
    if !b.supports_shared() {
        return;
    }
    let key = Key::from("give-up");
    let (h, w) = (b.locker(true), b.locker(true));
    let held = h.write_lock(&patient(), &key).await.expect("write");
    // A deadline passes.
    let late = w.read_lock(&short(50), &key).await;
    assert_err!(late, Error::Timeout { .. }, "must time out");
    // Cancelled.
    let (ctx, cancel) = Context::background().with_cancel();
    let waiter = spawn(&w, &key, |w, key| async move {
        w.write_lock(&ctx, &key).await.map(drop)
    });
    b.wait_queued(&key, 2).await;
    cancel.cancel();
    assert_err!(
        waiter.await.expect("task"),
        Error::Cancelled { .. },
        "cancel"
    );
    held.unlock().await.expect("unlock");
    // Both cleaned up before they returned.
    let clean = b.is_clean().await;
    assert!(clean, "a read or write lock that gave up left its entry");
    // Dropped while waiting: cleaned up in the background.
    let held = h.write_lock(&patient(), &key).await.expect("write");
    let dropped = spawn(&w, &key, |w, key| async move {
        w.write_lock(&patient(), &key).await.map(drop)
    });
    b.wait_queued(&key, 2).await;
    dropped.abort();
    let _ = dropped.await;
    held.unlock().await.expect("unlock");
    b.wait_clean().await;
    // A permit that times out; a dropped guard releases, and the next
    // caller gets the permit.
    let key = Key::from("give-up-permit");
    let permit = h.acquire_permits(&patient(), &key, 1, 1).await;
    let permit = permit.expect("acquire");
    let late = w.acquire_permits(&short(50), &key, 1, 1).await;
    assert_err!(late, Error::Timeout { .. }, "must time out");
    drop(permit);
    let again = w.acquire_permits(&patient(), &key, 1, 1).await;
    again
        .expect("acquire after drop")
        .unlock()
        .await
        .expect("unlock");
    b.wait_clean().await;
    b.finish().await;
}

/// Clear errors for bad input: a limit of 0, a semaphore key used with
/// another limit, or as a read/write lock.
///
/// Returns at once when [`Backend::supports_shared`] is `false`.
///
/// # Panics
/// When an error is not the documented one.
pub async fn shared_bad_input(b: &impl Backend) {
    if !b.supports_shared() {
        return;
    }
    let (locker, other) = (b.locker(true), b.locker(true));
    let key = Key::from("kinds");
    let e = locker.try_acquire_permits(&key, 1, 0).await;
    assert_err!(e, Error::InvalidConfig(_), "limit 0");
    let permit = locker.acquire_permits(&patient(), &key, 1, 3).await;
    let permit = permit.expect("acquire");
    let e = other.try_acquire_permits(&key, 1, 4).await;
    assert_err!(e, Error::InvalidKey { .. }, "another limit");
    let e = other.read_lock(&patient(), &key).await;
    assert_err!(e, Error::InvalidKey { .. }, "a read lock");
    let e = other.try_write_lock(&"".into()).await;
    assert_err!(e, Error::InvalidKey { .. }, "empty key");
    for (n, limit) in [(0, 3), (4, 3)] {
        let e = other.try_acquire_permits(&key, n, limit).await;
        assert_err!(e, Error::InvalidConfig(_), format!("{n} of {limit}"));
    }
    // A mutex of a key held as a semaphore (or read/write lock) is never
    // granted: refused, or waited for.
    match other.try_lock(&key).await {
        Ok(None) | Err(Error::InvalidKey { .. }) => {}
        Ok(Some(_)) => panic!("the mutex of a key whose permit is held was granted"),
        Err(e) => panic!("try_lock of a key held as a semaphore: {e}"),
    }
    match other.lock(&short(200), &key).await {
        Err(Error::InvalidKey { .. } | Error::Timeout { .. }) => {}
        Ok(_) => panic!("the mutex of a key whose permit is held was granted"),
        Err(e) => panic!("lock of a key held as a semaphore: {e}"),
    }
    permit.unlock().await.expect("unlock");
    assert!(b.is_clean().await, "a refused call left something behind");
    b.finish().await;
}
