//! The checks of who gets the lock: mutual exclusion with strictly growing
//! fencing tokens, fair (arrival) order, and independent keys.

use std::sync::{Arc, Mutex};

use super::backend::{Backend, mode_unsupported};
use super::common::{Turns, join, patient, spawn, take};
use crate::Key;

/// Many tasks on several lockers, one locker per entry of `modes` (`true`
/// for fair), take one key in turns and do a non-atomic read-sleep-write on
/// a shared counter.
///
/// Promises checked: no update is lost and no two tasks are ever inside at
/// once; every fresh guard reports its lock held and keeps it until unlock;
/// fencing tokens grow strictly from grant to grant; an `unlock` is not
/// reported as a loss; nothing is left behind at the end. Mixing fair and
/// unfair lockers on one key must keep all of this.
///
/// Returns at once when `modes` has a fair locker and the backend does not
/// support fair mode.
///
/// # Panics
/// When a promise is broken, or the backend's own methods panic.
///
/// # Cancel safety
/// Dropping the future ends the check halfway: its lockers and guards then
/// release in the background and the store is left as the backend's
/// cleanup leaves it. The same holds for every check.
///
/// # Examples
/// ```
/// # async fn example(backend: &impl fairlock::conformance::Backend) {
/// fairlock::conformance::mutual_exclusion(backend, &[true, false]).await;
/// # }
/// ```
pub async fn mutual_exclusion(b: &impl Backend, modes: &[bool]) {
    if modes.iter().any(|&fair| mode_unsupported(b, fair)) {
        return;
    }
    const TASKS_PER_LOCKER: usize = 3;
    const ROUNDS: u64 = 8;
    let key = Key::from("counter");
    let turns = Arc::new(Turns::default());
    let mut tasks = Vec::new();
    for &fair in modes {
        let locker = b.locker(fair);
        for _ in 0..TASKS_PER_LOCKER {
            let turns = Arc::clone(&turns);
            tasks.push(spawn(&locker, &key, |locker, key| async move {
                for _ in 0..ROUNDS {
                    let guard = locker.lock(&patient(), &key).await.expect("lock");
                    assert!(guard.is_held(), "a fresh guard must report its lock held");
                    let lost = guard.lost_token();
                    turns
                        .turn(guard.fencing_token(), "two holders at once", async {})
                        .await;
                    assert!(guard.is_held(), "lost while held");
                    locker.unlock(guard).await.expect("unlock");
                    // Our own release (a handoff changes the lock key) is
                    // not a loss.
                    assert!(!lost.is_cancelled(), "unlock reported as a loss");
                }
            }));
        }
    }
    join(tasks).await;
    turns.assert_count(modes.len() as u64 * TASKS_PER_LOCKER as u64 * ROUNDS);
    b.wait_clean().await;
    b.finish().await;
}

/// Fair waiters, queued one after another behind a holder (each one queued,
/// as [`Backend::wait_queued`] sees it, before the next starts), are granted
/// in that order once the holder unlocks; nothing is left behind.
///
/// Returns at once when the backend does not support fair mode.
///
/// # Panics
/// When a waiter is granted out of order or a lock call fails.
pub async fn fair_order(b: &impl Backend) {
    if !b.supports_fair() {
        return;
    }
    const WAITERS: usize = 6;
    let key = Key::from("queue");
    let holder = b.locker(true);
    let first = take(&*holder, &key).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let order = Arc::clone(&order);
        tasks.push(spawn(&b.locker(true), &key, |locker, k| async move {
            let guard = locker.lock(&patient(), &k).await.expect("lock");
            order.lock().unwrap_or_else(|e| e.into_inner()).push(i);
            guard.unlock().await.expect("unlock");
        }));
        b.wait_queued(&key, i + 1).await;
    }
    first.unlock().await.expect("unlock");
    join(tasks).await;
    let order = order.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(order, (0..WAITERS).collect::<Vec<_>>(), "grant order");
    b.wait_clean().await;
    b.finish().await;
}

/// Locks on `a`, `ab` and `a/b` are independent: while `a` is held and has
/// a waiter (queued, in fair mode), `ab` and `a/b` are taken and released
/// freely, and that never grants `a` to its waiter; the waiter gets `a`
/// once it is unlocked.
///
/// Returns at once when `fair` and the backend does not support fair mode.
///
/// # Panics
/// When a lock on one key grants or blocks another, or a lock call fails.
pub async fn key_isolation(b: &impl Backend, fair: bool) {
    if mode_unsupported(b, fair) {
        return;
    }
    let (a, ab, a_b) = (Key::from("a"), Key::from("ab"), Key::from("a/b"));
    let (h, w, other) = (b.locker(fair), b.locker(fair), b.locker(fair));
    let held = take(&*h, &a).await;
    let waiter = spawn(&w, &a, |w, a| async move {
        let g = w.lock(&patient(), &a).await.expect("lock a");
        g.unlock().await.expect("unlock");
    });
    if fair {
        b.wait_queued(&a, 1).await;
    }
    for _ in 0..5 {
        for k in [&ab, &a_b] {
            take(&*other, k).await.unlock().await.expect("unlock");
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

/// A burst of waiters on one locker: `n` `lock` calls at once from one
/// process ([`BURST`] in the suite, at most [`Backend::burst_limit`]),
/// queued behind a holder (in fair mode,
/// all of them before it unlocks), are each granted once, with fencing
/// tokens past the holder's, and nothing is left behind. What a service's
/// worker pool does when one resource becomes the bottleneck; a backend
/// whose own requests time out behind each other fails here (Redis did at
/// 10,000: `tests/redis.rs` runs that size).
///
/// Returns at once when `fair` and the backend does not support the mode.
///
/// # Panics
/// When a waiter's `lock` fails or a token is granted twice.
pub async fn a_burst_of_waiters_is_served(b: &impl Backend, fair: bool, n: usize) {
    if mode_unsupported(b, fair) {
        return;
    }
    let n = n.min(b.burst_limit());
    let key = Key::from("burst");
    let locker = b.locker(fair);
    let holder = take(&*locker, &key).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (locker, key) = (Arc::clone(&locker), key.clone());
        tasks.spawn(async move {
            let guard = locker.lock(&patient(), &key).await?;
            let token = guard.fencing_token();
            locker.unlock(guard).await?;
            Ok::<_, crate::Error>(token)
        });
    }
    if fair {
        b.wait_queued(&key, n).await;
    }
    let before = holder.fencing_token();
    locker.unlock(holder).await.expect("unlock");
    let mut tokens = Vec::with_capacity(n);
    while let Some(done) = tasks.join_next().await {
        tokens.push(done.expect("waiter task").expect("a waiter of the burst"));
    }
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), n, "a fencing token was granted twice");
    assert!(tokens[0] > before, "a token at or before the holder's");
    b.wait_clean().await;
    b.finish().await;
}

/// How many waiters the suite's [`a_burst_of_waiters_is_served`] starts
/// at once: enough to queue behind each other in every backend's client,
/// few enough for every etcd version's round of the suite.
pub const BURST: usize = 1_000;
