//! The conformance suite every backend runs: exclusion, fair order,
//! try_lock, cancellation and drop leave nothing behind, mixed modes, key
//! isolation, bad input.
//!
//! A backend's test file implements [`Backend`] and calls
//! `conformance_tests!(make_backend)`, where `make_backend(test_name)` is an
//! async fn returning a fresh backend (its own key prefix or store).
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fairlock::{Context, Error, Key, Locker};

/// What the suite needs from a backend under test.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// A new, independent locker.
    fn locker(&self, fair: bool) -> Arc<dyn Locker>;
    /// Waits (on events) until at least `n` fair waiters are queued on `key`.
    async fn wait_queued(&self, key: &Key, n: usize);
    /// Waits (on events) until nothing is held or queued.
    async fn wait_clean(&self);
    /// `true` if nothing is held or queued right now.
    async fn is_clean(&self) -> bool;
    /// Ends the test: closes the lockers made and asserts that nothing,
    /// keys or leases, is left behind.
    async fn finish(&self);
    /// `false` for a backend that refuses fair mode (Redis' Redlock): the
    /// cases that need fair lockers then return at once.
    fn supports_fair(&self) -> bool {
        true
    }
}

/// A deadline that only guards against a hang; never reached when correct.
fn patient() -> Context {
    Context::background().with_timeout(Duration::from_secs(120))
}

/// Many tasks on several lockers do a non-atomic read-sleep-write on a
/// shared counter; no update may be lost, no two may be inside at once, and
/// fencing tokens must grow strictly.
pub async fn mutual_exclusion(b: &impl Backend, modes: &[bool]) {
    if modes.contains(&true) && !b.supports_fair() {
        return;
    }
    const TASKS_PER_LOCKER: usize = 3;
    const ROUNDS: u64 = 8;
    let key = Key::from("counter");
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicU32::new(0));
    let last_token = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for &fair in modes {
        let locker = b.locker(fair);
        for _ in 0..TASKS_PER_LOCKER {
            let (locker, key) = (Arc::clone(&locker), key.clone());
            let (counter, inside, last_token) = (
                Arc::clone(&counter),
                Arc::clone(&inside),
                Arc::clone(&last_token),
            );
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = locker.lock(&patient(), &key).await.expect("lock");
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders at once"
                    );
                    assert!(guard.is_held(), "a fresh guard must report its lock held");
                    let lost = guard.lost_token();
                    let token = guard.fencing_token();
                    let previous = last_token.swap(token, Ordering::SeqCst);
                    assert!(token > previous, "fencing token {token} after {previous}");
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await; // widen the race
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.is_held(), "lost while held");
                    locker.unlock(guard).await.expect("unlock");
                    // Our own release (a handoff changes the lock key) is
                    // not a loss.
                    assert!(!lost.is_cancelled(), "unlock reported as a loss");
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("task");
    }
    let want = modes.len() as u64 * TASKS_PER_LOCKER as u64 * ROUNDS;
    assert_eq!(counter.load(Ordering::SeqCst), want, "lost updates");
    b.wait_clean().await;
    b.finish().await;
}

/// Fair waiters, queued one after another, are granted in that order.
pub async fn fair_order(b: &impl Backend) {
    if !b.supports_fair() {
        return;
    }
    const WAITERS: usize = 6;
    let key = Key::from("queue");
    let holder = b.locker(true);
    let first = holder
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("free");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let locker = b.locker(true);
        let (k, order) = (key.clone(), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            let guard = locker.lock(&patient(), &k).await.expect("lock");
            order.lock().unwrap().push(i);
            guard.unlock().await.expect("unlock");
        }));
        b.wait_queued(&key, i + 1).await;
    }
    first.unlock().await.expect("unlock");
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(*order.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
    b.wait_clean().await;
    b.finish().await;
}

/// try_lock takes a free lock, answers None for a held one (also to the
/// holder's own locker), and the lock is free again after unlock.
pub async fn try_lock(b: &impl Backend) {
    for fair in [true, false] {
        if fair && !b.supports_fair() {
            continue;
        }
        let key = Key::from(format!("try-{fair}"));
        let (a, c) = (b.locker(fair), b.locker(fair));
        let guard = a
            .try_lock(&key)
            .await
            .expect("try_lock")
            .expect("free lock");
        assert_eq!(guard.key(), &key);
        assert!(c.try_lock(&key).await.expect("try_lock").is_none());
        assert!(a.try_lock(&key).await.expect("try_lock").is_none());
        guard.unlock().await.expect("unlock");
        let again = c
            .try_lock(&key)
            .await
            .expect("try_lock")
            .expect("free again");
        again.unlock().await.expect("unlock");
    }
    assert!(b.is_clean().await);
    b.finish().await;
}

/// A lock that times out returns `Timeout` and leaves nothing behind, at
/// once (checked before anything else can clean up).
pub async fn timeout_leaves_nothing(b: &impl Backend, fair: bool) {
    if fair && !b.supports_fair() {
        return;
    }
    let key = Key::from("timeout");
    let (h, w) = (b.locker(fair), b.locker(fair));
    let held = h.try_lock(&key).await.expect("try_lock").expect("free");
    let ctx = Context::background().with_timeout(Duration::from_millis(200));
    let err = w.lock(&ctx, &key).await.expect_err("must time out");
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("timeout") || err.to_string().contains("timed out"));
    held.unlock().await.expect("unlock");
    assert!(b.is_clean().await, "a timed-out waiter left keys behind");
    b.finish().await;
}

/// A cancelled lock returns `Cancelled` and leaves nothing behind at once.
pub async fn cancel_leaves_nothing(b: &impl Backend, fair: bool) {
    if fair && !b.supports_fair() {
        return;
    }
    let key = Key::from("cancel");
    let (h, w) = (b.locker(fair), b.locker(fair));
    let held = h.try_lock(&key).await.expect("try_lock").expect("free");
    let (ctx, cancel) = Context::background().with_cancel();
    let waiter = {
        let key = key.clone();
        tokio::spawn(async move { w.lock(&ctx, &key).await })
    };
    if fair {
        b.wait_queued(&key, 1).await;
    }
    cancel.cancel();
    let err = waiter.await.expect("task").expect_err("must be cancelled");
    assert!(matches!(err, Error::Cancelled { .. }), "{err}");
    held.unlock().await.expect("unlock");
    assert!(b.is_clean().await, "a cancelled waiter left keys behind");
    b.finish().await;
}

/// Dropping a waiting `lock` future removes its queue entry in the
/// background; the lock then goes to others normally.
pub async fn drop_future_leaves_nothing(b: &impl Backend, fair: bool) {
    if fair && !b.supports_fair() {
        return;
    }
    let key = Key::from("dropped");
    let (h, w, later) = (b.locker(fair), b.locker(fair), b.locker(fair));
    let held = h.try_lock(&key).await.expect("try_lock").expect("free");
    let waiter = {
        let key = key.clone();
        tokio::spawn(async move { w.lock(&patient(), &key).await })
    };
    if fair {
        b.wait_queued(&key, 1).await;
    } else {
        tokio::task::yield_now().await;
    }
    waiter.abort();
    assert!(waiter.await.expect_err("aborted").is_cancelled());
    held.unlock().await.expect("unlock");
    b.wait_clean().await;
    let guard = later.lock(&patient(), &key).await.expect("lock after drop");
    guard.unlock().await.expect("unlock");
    b.wait_clean().await;
    b.finish().await;
}

/// Dropping a guard releases the lock in the background.
pub async fn drop_guard_releases(b: &impl Backend, fair: bool) {
    if fair && !b.supports_fair() {
        return;
    }
    let key = Key::from("drop-guard");
    let (a, c) = (b.locker(fair), b.locker(fair));
    let guard = a.lock(&patient(), &key).await.expect("lock");
    drop(guard);
    let guard = c.lock(&patient(), &key).await.expect("lock after drop");
    guard.unlock().await.expect("unlock");
    b.wait_clean().await;
    b.finish().await;
}

/// Locks on `a` and `ab` (or `a/b`) are independent: holding or cycling one
/// never grants or blocks the other.
pub async fn key_isolation(b: &impl Backend, fair: bool) {
    if fair && !b.supports_fair() {
        return;
    }
    let (a, ab, a_b) = (Key::from("a"), Key::from("ab"), Key::from("a/b"));
    let (h, w, other) = (b.locker(fair), b.locker(fair), b.locker(fair));
    let held = h
        .try_lock(&a)
        .await
        .expect("try_lock a")
        .expect("a is free");
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move {
            let g = w.lock(&patient(), &a).await.expect("lock a");
            g.unlock().await.expect("unlock");
        })
    };
    if fair {
        b.wait_queued(&a, 1).await;
    }
    for _ in 0..5 {
        for k in [&ab, &a_b] {
            let g = other
                .try_lock(k)
                .await
                .expect("try_lock")
                .expect("independent key is free");
            g.unlock().await.expect("unlock");
        }
    }
    assert!(
        !waiter.is_finished(),
        "a waiter on `a` was granted while `a` was held"
    );
    held.unlock().await.expect("unlock");
    waiter.await.expect("waiter");
    b.wait_clean().await;
    b.finish().await;
}

/// Bad keys get a clear error from every entry point, for both modes.
pub async fn bad_input(b: &impl Backend) {
    let long = "k".repeat(fairlock::MAX_KEY_LEN + 1);
    for fair in [true, false] {
        let l = b.locker(fair);
        for (key, says) in [
            ("", "empty"),
            ("_OWNERS_", "reserved"),
            ("x/_OWNERS_/y", "reserved"),
            (long.as_str(), "at most"),
        ] {
            let key = Key::from(key);
            let e = l.try_lock(&key).await.expect_err("bad key");
            assert!(
                matches!(&e, Error::InvalidKey { .. }) && e.to_string().contains(says),
                "{e}"
            );
            let e = l.lock(&patient(), &key).await.expect_err("bad key");
            assert!(
                matches!(&e, Error::InvalidKey { .. }) && e.to_string().contains(says),
                "{e}"
            );
        }
        let (ctx, cancel) = Context::background().with_cancel();
        cancel.cancel();
        let e = l
            .lock(&ctx, &Key::from("ok"))
            .await
            .expect_err("cancelled ctx");
        assert!(matches!(e, Error::Cancelled { .. }), "{e}");
    }
    assert!(b.is_clean().await);
    b.finish().await;
}

/// Instantiates the suite for a backend constructor `async fn(&str) -> B`.
#[macro_export]
macro_rules! conformance_tests {
    ($make:path) => {
        mod conformance_suite {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mutual_exclusion_fair() {
                conformance::mutual_exclusion(&$make("mx-fair").await, &[true, true, true]).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mutual_exclusion_unfair() {
                conformance::mutual_exclusion(&$make("mx-unfair").await, &[false, false, false])
                    .await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mutual_exclusion_mixed_fair_and_unfair() {
                conformance::mutual_exclusion(
                    &$make("mx-mixed").await,
                    &[true, false, true, false],
                )
                .await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fair_order_in_arrival() {
                conformance::fair_order(&$make("order").await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn try_lock_semantics() {
                conformance::try_lock(&$make("try").await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn timeout_leaves_nothing_fair() {
                conformance::timeout_leaves_nothing(&$make("timeout-fair").await, true).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn timeout_leaves_nothing_unfair() {
                conformance::timeout_leaves_nothing(&$make("timeout-unfair").await, false).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn cancel_leaves_nothing_fair() {
                conformance::cancel_leaves_nothing(&$make("cancel-fair").await, true).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn cancel_leaves_nothing_unfair() {
                conformance::cancel_leaves_nothing(&$make("cancel-unfair").await, false).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn drop_future_leaves_nothing_fair() {
                conformance::drop_future_leaves_nothing(&$make("dropf-fair").await, true).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn drop_future_leaves_nothing_unfair() {
                conformance::drop_future_leaves_nothing(&$make("dropf-unfair").await, false).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn drop_guard_releases_fair() {
                conformance::drop_guard_releases(&$make("dropg-fair").await, true).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn drop_guard_releases_unfair() {
                conformance::drop_guard_releases(&$make("dropg-unfair").await, false).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn key_isolation_fair() {
                conformance::key_isolation(&$make("iso-fair").await, true).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn key_isolation_unfair() {
                conformance::key_isolation(&$make("iso-unfair").await, false).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn bad_input_is_a_clear_error() {
                conformance::bad_input(&$make("bad").await).await;
            }
        }
    };
}
