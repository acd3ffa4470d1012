//! The checks of giving up: a `lock` that times out or is cancelled, a
//! dropped `lock` future and a dropped guard leave nothing behind.

use super::backend::{Backend, mode_unsupported};
use super::common::{assert_err, patient, short, spawn, take};
use crate::{Context, Error, Key};

/// A `lock` on a held key whose context times out returns
/// [`Error::Timeout`] (its message says so) and has removed its queue entry
/// before returning: once the holder unlocks, [`Backend::is_clean`] holds
/// at once.
///
/// Returns at once when `fair` and the backend does not support fair mode.
///
/// # Panics
/// When the error is another, or anything is left behind.
pub async fn timeout_leaves_nothing(b: &impl Backend, fair: bool) {
    if mode_unsupported(b, fair) {
        return;
    }
    let key = Key::from("timeout");
    let (h, w) = (b.locker(fair), b.locker(fair));
    let held = take(&*h, &key).await;
    let err = w.lock(&short(200), &key).await.expect_err("must time out");
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("timeout") || err.to_string().contains("timed out"));
    held.unlock().await.expect("unlock");
    assert!(b.is_clean().await, "a timed-out waiter left keys behind");
    b.finish().await;
}

/// A `lock` on a held key whose context is cancelled (after it queued, in
/// fair mode) returns [`Error::Cancelled`] and has removed its queue entry
/// before returning: once the holder unlocks, [`Backend::is_clean`] holds
/// at once.
///
/// Returns at once when `fair` and the backend does not support fair mode.
///
/// # Panics
/// When the error is another, or anything is left behind.
pub async fn cancel_leaves_nothing(b: &impl Backend, fair: bool) {
    if mode_unsupported(b, fair) {
        return;
    }
    let key = Key::from("cancel");
    let (h, w) = (b.locker(fair), b.locker(fair));
    let held = take(&*h, &key).await;
    let (ctx, cancel) = Context::background().with_cancel();
    let waiter = spawn(&w, &key, |w, key| async move { w.lock(&ctx, &key).await });
    if fair {
        b.wait_queued(&key, 1).await;
    }
    cancel.cancel();
    assert_err!(
        waiter.await.expect("task"),
        Error::Cancelled { .. },
        "cancelled"
    );
    held.unlock().await.expect("unlock");
    assert!(b.is_clean().await, "a cancelled waiter left keys behind");
    b.finish().await;
}

/// Dropping a waiting `lock` future (its task aborted, after it queued in
/// fair mode) removes its queue entry in the background
/// ([`Backend::wait_clean`] returns), and the lock then goes to a later
/// `lock` as usual.
///
/// Returns at once when `fair` and the backend does not support fair mode.
///
/// # Panics
/// When the entry stays (the wait's guard deadline) or the later `lock`
/// fails.
pub async fn drop_future_leaves_nothing(b: &impl Backend, fair: bool) {
    if mode_unsupported(b, fair) {
        return;
    }
    let key = Key::from("dropped");
    let (h, w) = (b.locker(fair), b.locker(fair));
    let held = take(&*h, &key).await;
    let waiter = spawn(
        &w,
        &key,
        |w, key| async move { w.lock(&patient(), &key).await },
    );
    if fair {
        b.wait_queued(&key, 1).await;
    } else {
        tokio::task::yield_now().await;
    }
    waiter.abort();
    assert!(waiter.await.expect_err("aborted").is_cancelled());
    held.unlock().await.expect("unlock");
    b.wait_clean().await;
    lock_again_and_finish(b, fair, &key).await;
}

/// Dropping a guard without `unlock` releases the lock in the background:
/// another locker's `lock` on the key is then granted.
///
/// Returns at once when `fair` and the backend does not support fair mode.
///
/// # Panics
/// When the lock is never released (the guard deadline of the second
/// `lock`) or anything is left behind.
pub async fn drop_guard_releases(b: &impl Backend, fair: bool) {
    if mode_unsupported(b, fair) {
        return;
    }
    let key = Key::from("drop-guard");
    let a = b.locker(fair);
    drop(a.lock(&patient(), &key).await.expect("lock"));
    lock_again_and_finish(b, fair, &key).await;
}

/// A new locker's `lock` of `key` is granted (after a drop); then it
/// unlocks and the check ends clean.
async fn lock_again_and_finish(b: &impl Backend, fair: bool, key: &Key) {
    let later = b.locker(fair);
    let guard = later.lock(&patient(), key).await.expect("lock after drop");
    guard.unlock().await.expect("unlock");
    b.wait_clean().await;
    b.finish().await;
}
