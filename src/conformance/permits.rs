//! Semaphore checks of calls that take several permits, and the load
//! that counts how many permits are held at once (`lines.rs` runs them).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::Backend;
use super::common::{join, patient, refused, spawn};
use crate::Key;

/// Calls that take several permits: a call that does not fit waits, and
/// holds back the smaller ones behind it (no barging); one release grants
/// every call that fits then; under load the permits held never exceed
/// the limit.
pub(super) async fn several_permits(b: &impl Backend) {
    const LIMIT: u32 = 3;
    let key = Key::from("sem-n");
    let lockers: Vec<_> = (0..4).map(|_| b.locker(true)).collect();
    let two = lockers[0].try_acquire_permits(&key, 2, LIMIT).await;
    let two = two.expect("try").expect("free");
    let held = refused(lockers[1].try_acquire_permits(&key, 2, LIMIT)).await;
    assert!(held, "2 + 2 permits of 3");
    let mut waiters = Vec::new();
    for (i, n) in [(1, 2), (2, 1)] {
        waiters.push(spawn(&lockers[i], &key, move |locker, k| async move {
            locker.acquire_permits(&patient(), &k, n, LIMIT).await
        }));
        b.wait_queued(&key, i + 1).await;
    }
    // One permit is free, but a call of 2 waits ahead: nobody barges.
    let held = refused(lockers[3].try_acquire_permits(&key, 1, LIMIT)).await;
    assert!(held, "a permit taken past a waiting call of 2");
    two.unlock().await.expect("unlock");
    let granted = join(waiters).await;
    for g in granted {
        g.expect("2 + 1 fit in 3 once 2 left")
            .unlock()
            .await
            .expect("unlock");
    }

    // Under load, calls of 1 to 3 permits: never more than the limit held.
    let most = most_held(b, &key, LIMIT, (4, 3), |task, round| {
        (task + round) % LIMIT + 1
    })
    .await;
    assert!(most <= LIMIT as usize, "{most} permits of {LIMIT} at once");
}

/// The most permits of `key` (limit `limit`) held at once while `tasks`
/// lockers each make `rounds` calls, call `round` of task `task` taking
/// `n(task, round)` permits, counted inside every holding.
pub(super) async fn most_held(
    b: &impl Backend,
    key: &Key,
    limit: u32,
    (tasks, rounds): (u32, u32),
    n: fn(u32, u32) -> u32,
) -> usize {
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..tasks)
        .map(|task| {
            let (holding, most) = (Arc::clone(&holding), Arc::clone(&most));
            spawn(&b.locker(true), key, move |locker, key| async move {
                for round in 0..rounds {
                    let n = n(task, round);
                    let guard = locker.acquire_permits(&patient(), &key, n, limit).await;
                    let guard = guard.expect("acquire");
                    let n = n as usize;
                    let now = holding.fetch_add(n, Ordering::SeqCst) + n;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    holding.fetch_sub(n, Ordering::SeqCst);
                    guard.unlock().await.expect("unlock");
                }
            })
        })
        .collect();
    join(tasks).await;
    most.load(Ordering::SeqCst)
}
