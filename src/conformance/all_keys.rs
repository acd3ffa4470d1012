//! The checks of several keys at once ([`crate::Locker::lock_all`]): all
//! or nothing, no deadlock whatever order callers name their keys in,
//! overlapping sets, arrival order shared with single-key callers, giving
//! up, and clear errors. Run for a backend whose
//! [`Backend::supports_lock_all`] is `true`.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::backend::{Backend, mode_unsupported};
use super::common::{assert_err, join, patient, refused, short, spawn, take};
use crate::{Context, Error, Key, Locker};

fn keys(b: &impl Backend, names: &[&str]) -> Vec<Key> {
    names.iter().map(|n| b.lock_all_key(n)).collect()
}

fn skip(b: &impl Backend, fair: bool) -> bool {
    !b.supports_lock_all() || mode_unsupported(b, fair)
}

/// All or nothing: with one of three keys held, `try_lock_all` takes none
/// and a `lock_all` that times out leaves the two free keys free (nothing
/// held, nothing queued, right after it returns); once the third is free,
/// `try_lock_all` takes all three, each with a token greater than the
/// key's last, others are refused each key, and `unlock` frees them all.
/// A key named twice counts once.
///
/// Returns at once without `lock_all`, or when `fair` and the backend
/// does not support fair mode.
///
/// # Panics
/// When a promise is broken or a call fails.
pub async fn lock_all_is_all_or_nothing(b: &impl Backend, fair: bool) {
    if skip(b, fair) {
        return;
    }
    let [x, y, z] = [
        b.lock_all_key("x"),
        b.lock_all_key("y"),
        b.lock_all_key("z"),
    ];
    let all = [x.clone(), y.clone(), z.clone()];
    let (h, m, other) = (b.locker(fair), b.locker(fair), b.locker(fair));
    let before = take(&*other, &x).await;
    let x_token = before.fencing_token();
    before.unlock().await.expect("unlock");
    let held = take(&*h, &y).await;
    assert!(refused(m.try_lock_all(&all)).await, "try_lock_all took y");
    assert_err!(
        m.lock_all(&short(200), &all).await,
        Error::Timeout { .. },
        "lock_all of a held key"
    );
    held.unlock().await.expect("unlock");
    assert!(
        b.is_clean().await,
        "a lock_all that gave up left keys behind"
    );
    let both = m
        .try_lock_all(&[x.clone(), y.clone(), z.clone(), x.clone()])
        .await
        .expect("try_lock_all")
        .expect("all free");
    assert_eq!(both.keys().cloned().collect::<Vec<_>>(), all.to_vec());
    assert!(both.is_held());
    assert!(both.fencing_token(&x).expect("x's token") > x_token);
    for key in &all {
        assert!(refused(other.try_lock(key)).await, "{key} not held");
    }
    both.unlock().await.expect("unlock");
    for key in &all {
        take(&*other, key).await.unlock().await.expect("unlock");
    }
    b.wait_clean().await;
    b.finish().await;
}

/// Callers naming the same two keys in opposite orders (`[p, q]` and
/// `[q, p]`), several per locker, take them in turns many times: all
/// finish (no deadlock), never two inside at once.
///
/// Returns as [`lock_all_is_all_or_nothing`] does.
///
/// # Panics
/// When two hold at once, or the callers do not finish before
/// [`patient`]'s deadline.
pub async fn lock_all_opposite_orders(b: &impl Backend, fair: bool) {
    if skip(b, fair) {
        return;
    }
    const ROUNDS: usize = 6;
    let inside = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for order in [["p", "q"], ["q", "p"], ["p", "q"], ["q", "p"]] {
        let (locker, inside, order) = (b.locker(fair), Arc::clone(&inside), keys(b, &order));
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let both = locker.lock_all(&patient(), &order).await;
                let both = both.expect("lock_all");
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two inside");
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                both.unlock().await.expect("unlock");
            }
        }));
    }
    join(tasks).await;
    b.wait_clean().await;
    b.finish().await;
}

/// 16 callers, each taking 2 of 8 keys (overlapping sets) 3 times: per
/// key never two holders at once, each key's tokens grow, all finish.
///
/// Returns as [`lock_all_is_all_or_nothing`] does.
///
/// # Panics
/// When a key has two holders, a token does not grow, or a call fails.
pub async fn lock_all_overlapping_sets(b: &impl Backend, fair: bool) {
    if skip(b, fair) {
        return;
    }
    const KEYS: usize = 8;
    const CALLERS: usize = 16;
    const ROUNDS: usize = 3;
    let names: Vec<Key> = (0..KEYS)
        .map(|i| b.lock_all_key(&format!("k{i}")))
        .collect();
    let inside: Arc<Vec<AtomicU32>> = Arc::new((0..KEYS).map(|_| AtomicU32::new(0)).collect());
    let last: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let lockers: Vec<Arc<dyn Locker>> = (0..4).map(|_| b.locker(fair)).collect();
    let mut tasks = Vec::new();
    for c in 0..CALLERS {
        // Two distinct keys per caller, spread over all pairs' shapes.
        let (i, j) = (c % KEYS, (c * 3 + 1 + c / KEYS) % KEYS);
        let j = if i == j { (j + 1) % KEYS } else { j };
        let mine = vec![names[i].clone(), names[j].clone()];
        let (locker, inside, last) = (
            Arc::clone(&lockers[c % lockers.len()]),
            Arc::clone(&inside),
            Arc::clone(&last),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let both = locker.lock_all(&patient(), &mine).await.expect("lock_all");
                for (n, key) in [(i, &mine[0]), (j, &mine[1])] {
                    assert_eq!(
                        inside[n].fetch_add(1, Ordering::SeqCst),
                        0,
                        "two hold {key}"
                    );
                    let token = both.fencing_token(key).expect("token");
                    let previous = last[n].fetch_max(token, Ordering::SeqCst);
                    assert!(token > previous, "{key}: token {token} after {previous}");
                }
                tokio::task::yield_now().await;
                for n in [i, j] {
                    inside[n].fetch_sub(1, Ordering::SeqCst);
                }
                both.unlock().await.expect("unlock");
            }
        }));
    }
    join(tasks).await;
    b.wait_clean().await;
    b.finish().await;
}

/// Arrival order across single-key and multi-key callers: behind a holder
/// of `a`, a `lock(a)`, then a `lock_all([a, b])` (which takes the free
/// `b` at once, as its turn), then a `lock(b)` and a `lock(a)` queue; the
/// grants come in that order: the first `lock(a)`, then `lock_all`, then
/// the two others.
///
/// Returns at once without `lock_all` or fair mode.
///
/// # Panics
/// When a caller is granted out of arrival order, or a call fails.
pub async fn lock_all_keeps_arrival_order(b: &impl Backend) {
    if skip(b, true) {
        return;
    }
    let (a, bee) = (b.lock_all_key("a"), b.lock_all_key("b"));
    let held = take(&*b.locker(true), &a).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let record = |order: &Arc<Mutex<Vec<&'static str>>>, who| {
        order.lock().unwrap_or_else(|e| e.into_inner()).push(who);
    };
    let single = |who: &'static str, key: &Key| {
        let order = Arc::clone(&order);
        spawn(&b.locker(true), key, move |l, key| async move {
            let g = l.lock(&patient(), &key).await.expect("lock");
            record(&order, who);
            g.unlock().await.expect("unlock");
        })
    };
    let mut tasks = vec![single("first a", &a)];
    b.wait_queued(&a, 1).await;
    let multi = {
        let order = Arc::clone(&order);
        let both = [a.clone(), bee.clone()];
        spawn(&b.locker(true), &a, move |l, _| async move {
            let g = l.lock_all(&patient(), &both).await.expect("lock_all");
            record(&order, "a and b");
            g.unlock().await.expect("unlock");
        })
    };
    tasks.push(multi);
    b.wait_queued(&a, 2).await;
    tasks.push(single("then b", &bee));
    b.wait_queued(&bee, 1).await;
    tasks.push(single("then a", &a));
    b.wait_queued(&a, 3).await;
    held.unlock().await.expect("unlock");
    join(tasks).await;
    let order = order.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(&order[..2], ["first a", "a and b"], "grant order {order:?}");
    b.wait_clean().await;
    b.finish().await;
}

/// A `lock_all` that waits for a held key, cancelled (fair: after it
/// queued, holding the free key as its turn) or timed out (unfair),
/// returns its error having removed its entries and released what it
/// held: once the holder unlocks, [`Backend::is_clean`] holds at once.
/// A dropped `lock_all` future cleans up in the background.
///
/// Returns as [`lock_all_is_all_or_nothing`] does.
///
/// # Panics
/// When the error is another, or anything is left behind.
pub async fn lock_all_giving_up_leaves_nothing(b: &impl Backend, fair: bool) {
    if skip(b, fair) {
        return;
    }
    let (free, busy) = (b.lock_all_key("free"), b.lock_all_key("busy"));
    let both = [free.clone(), busy.clone()];
    let (h, w) = (b.locker(fair), b.locker(fair));
    let held = take(&*h, &busy).await;
    if fair {
        let (ctx, cancel) = Context::background().with_cancel();
        let call = both.clone();
        let waiter = spawn(
            &w,
            &busy,
            |w, _| async move { w.lock_all(&ctx, &call).await },
        );
        b.wait_queued(&busy, 1).await;
        cancel.cancel();
        assert_err!(
            waiter.await.expect("task"),
            Error::Cancelled { .. },
            "cancelled"
        );
        // It held `free` as its turn: released before the error returned.
        let other = b.locker(true);
        let turn = other.try_lock(&free).await.expect("try_lock");
        turn.expect("`free` still held by a cancelled lock_all")
            .unlock()
            .await
            .expect("unlock");
    } else {
        assert_err!(
            w.lock_all(&short(200), &both).await,
            Error::Timeout { .. },
            "timeout"
        );
    }
    held.unlock().await.expect("unlock");
    assert!(
        b.is_clean().await,
        "a lock_all that gave up left keys behind"
    );
    if fair {
        let held = take(&*h, &busy).await;
        let dropped = spawn(&w, &busy, |w, _| async move {
            w.lock_all(&patient(), &both).await
        });
        b.wait_queued(&busy, 1).await;
        dropped.abort();
        assert!(dropped.await.is_err_and(|e| e.is_cancelled()));
        held.unlock().await.expect("unlock");
        b.wait_clean().await;
    }
    take(&*w, &free).await.unlock().await.expect("unlock");
    b.finish().await;
}

/// Clear errors, with nothing taken: no key, a bad key among good ones,
/// more keys than any backend takes at once, and (with read/write locks)
/// a key in use as a read/write lock.
///
/// Returns at once without `lock_all`.
///
/// # Panics
/// When a call succeeds or fails with another error, or leaves anything.
pub async fn lock_all_bad_input(b: &impl Backend) {
    if !b.supports_lock_all() {
        return;
    }
    let l = b.locker(b.supports_fair());
    let ok = b.lock_all_key("ok");
    assert_err!(
        l.lock_all(&patient(), &[]).await,
        Error::InvalidKey { .. },
        "no key"
    );
    let bad = [ok.clone(), Key::from("")];
    assert_err!(
        l.try_lock_all(&bad).await,
        Error::InvalidKey { .. },
        "empty key"
    );
    let many: Vec<Key> = (0..5000).map(|i| Key::from(format!("m{i}"))).collect();
    match l.lock_all(&patient(), &many).await {
        Err(Error::InvalidKey { reason, .. }) => {
            assert!(reason.contains("at most"), "says the limit: {reason}");
        }
        other => panic!("5000 keys: {other:?}"),
    }
    if b.supports_shared() {
        let line = b.lock_all_key("line");
        let reader = l.read_lock(&patient(), &line).await.expect("read_lock");
        let mixed = [ok.clone(), line.clone()];
        assert_err!(
            l.lock_all(&patient(), &mixed).await,
            Error::InvalidKey { .. },
            "a line"
        );
        assert_err!(
            l.try_lock_all(&mixed).await,
            Error::InvalidKey { .. },
            "a line"
        );
        reader.unlock().await.expect("unlock");
    }
    assert!(b.is_clean().await, "a refused lock_all left keys behind");
    b.finish().await;
}
