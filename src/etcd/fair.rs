//! Fair mode: wait in the `_OWNERS_` queue, in create-revision order.
//!
//! A waiter is granted in one of two ways:
//! - its predecessor hands the lock key over in its release txn and touches
//!   the waiter's queue key; the locker's long-lived watch on its own queue
//!   keys delivers that touch (one push, no read);
//! - it finds itself at the head of the queue with the lock key free (the
//!   holder crashed, a predecessor gave up, or an unfair holder released)
//!   and creates the lock key itself, guarded by compares.
//!
//! Meanwhile it watches only its predecessor's queue key (or, at the head,
//! the lock key) for deletion, so a release wakes one waiter whatever the
//! queue length.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp};

use super::keys::{Layout, prefix_end};
use super::locker::{Attempt, Inner, put_leased, range_at, revision};
use super::watch::{Target, WatchMsg};
use crate::{Error, LockGuard, Result};

/// What a re-read of the queue found.
enum State {
    Granted(i64),
    /// Our queue key is gone: the session lease expired or it was deleted.
    Gone,
    /// Wait for `target` to be deleted after revision `since`.
    Wait {
        target: Vec<u8>,
        since: i64,
    },
    /// We head the queue and the lock key is free.
    Free,
}

pub(crate) async fn acquire(slot: &mut Option<Attempt>) -> Result<LockGuard> {
    let attempt = slot.as_ref().ok_or_else(internal)?;
    let inner = Arc::clone(&attempt.inner);
    let (key, layout, value) = (
        attempt.key.clone(),
        attempt.layout.clone(),
        attempt.value.clone(),
    );
    let queue_key = attempt.queue_key.clone().ok_or_else(internal)?;
    let lease = inner.session.lease().await?;

    // Grants arrive on the locker's long-lived watch of its own queue keys.
    // If it is open, subscribe before enqueueing so no grant can be missed;
    // if not, open it after (a locker that never waits never watches) and
    // close the gap with one read.
    let own_prefix = layout.locker_queue(&inner.id);
    let own_end = prefix_end(&own_prefix);
    let open_own = inner.shared.existing(&own_prefix, Some(&own_end)).await;

    // Free and nobody queued: take the lock key, no queue entry needed.
    // Otherwise: queue, and learn our predecessor, in the same txn.
    let enqueue = Txn::new()
        .when([
            Compare::create_revision(layout.lock.clone(), CompareOp::Equal, 0),
            Compare::create_revision(layout.queue.clone(), CompareOp::Equal, 0).with_prefix(),
        ])
        .and_then([put_leased(&layout.lock, &value, lease.id)])
        .or_else([
            put_leased(&queue_key, &value, lease.id),
            TxnOp::get(
                layout.queue.clone(),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Create, SortOrder::Descend)
                        .with_limit(2)
                        .with_keys_only(),
                ),
            ),
        ]);
    let resp = match inner.txn("enqueue", enqueue).await {
        Ok(resp) => resp,
        Err(e) => return Err(inner.lease_error(&key, &lease, e).await),
    };
    let my_rev = revision(&resp);
    if resp.succeeded() {
        let attempt = slot.take().ok_or_else(internal)?;
        return Ok(attempt.granted(my_rev, None, lease, false));
    }
    let (mut own, mut recheck_first) = match open_own {
        Some(listener) => {
            inner.shared.touch(&own_prefix, Some(&own_end)).await;
            (listener, false)
        }
        None => (
            inner.shared.listen(&own_prefix, Some(&own_end)).await?,
            true,
        ),
    };
    let predecessor = range_at(&resp, 1).and_then(|g| {
        g.kvs()
            .iter()
            .find(|kv| kv.key() != queue_key.as_slice())
            .map(|kv| kv.key().to_vec())
    });
    let mut target = predecessor.unwrap_or_else(|| layout.lock.clone());
    let mut since = my_rev;

    loop {
        let mut sub = inner
            .hub
            .subscribe(Target {
                key: target.clone(),
                range_end: None,
                // Replays from our enqueue: no deletion can slip by. Such a
                // watch may start unsynced (~100 ms late), but it only
                // matters when a predecessor vanishes without a handoff.
                start_revision: Some(since + 1),
            })
            .await?;
        let mut recheck = std::mem::take(&mut recheck_first);
        while !recheck {
            tokio::select! {
                msg = own.recv() => match msg {
                    WatchMsg::Events { events } => {
                        for ev in events.iter().filter(|e| e.key == queue_key) {
                            if !ev.put {
                                return Err(session_lost(&key));
                            }
                            if ev.mod_revision > ev.create_revision {
                                let attempt = slot.take().ok_or_else(internal)?;
                                return Ok(attempt.granted(ev.mod_revision, Some(my_rev), lease, true));
                            }
                        }
                    }
                    WatchMsg::Ended(_) => {
                        own = inner.shared.listen(&own_prefix, Some(&own_end)).await?;
                        recheck = true;
                    }
                    WatchMsg::Created => {}
                },
                msg = sub.recv() => match msg {
                    WatchMsg::Events { events } => {
                        recheck = events.iter().any(|e| !e.put && e.key == target);
                    }
                    WatchMsg::Ended(_) => recheck = true,
                    WatchMsg::Created => {}
                },
            }
        }
        loop {
            match check(&inner, &layout, &queue_key, &value, my_rev).await? {
                State::Granted(token) => {
                    let attempt = slot.take().ok_or_else(internal)?;
                    return Ok(attempt.granted(token, Some(my_rev), lease, true));
                }
                State::Gone => return Err(session_lost(&key)),
                State::Wait {
                    target: t,
                    since: s,
                } => {
                    (target, since) = (t, s);
                    break;
                }
                State::Free => {
                    let take = Txn::new()
                        .when([
                            Compare::create_revision(layout.lock.clone(), CompareOp::Equal, 0),
                            Compare::create_revision(queue_key.clone(), CompareOp::Equal, my_rev),
                            Compare::create_revision(
                                layout.queue.clone(),
                                CompareOp::Greater,
                                my_rev - 1,
                            )
                            .with_prefix(),
                        ])
                        .and_then([put_leased(&layout.lock, &value, lease.id)]);
                    let resp = match inner.txn("acquire", take).await {
                        Ok(resp) => resp,
                        Err(e) => return Err(inner.lease_error(&key, &lease, e).await),
                    };
                    if resp.succeeded() {
                        let attempt = slot.take().ok_or_else(internal)?;
                        return Ok(attempt.granted(revision(&resp), Some(my_rev), lease, true));
                    }
                }
            }
        }
    }
}

/// Re-reads our queue key, the lock key and our predecessor in one
/// read-only txn.
async fn check(
    inner: &Inner,
    layout: &Layout,
    queue_key: &[u8],
    value: &[u8],
    my_rev: i64,
) -> Result<State> {
    let read = Txn::new().and_then([
        TxnOp::get(queue_key.to_vec(), None),
        TxnOp::get(layout.lock.clone(), None),
        TxnOp::get(
            layout.queue.clone(),
            Some(
                GetOptions::new()
                    .with_prefix()
                    .with_max_create_revision((my_rev - 1).max(1))
                    .with_sort(SortTarget::Create, SortOrder::Descend)
                    .with_limit(1)
                    .with_keys_only(),
            ),
        ),
    ]);
    let resp = inner.txn("queue check", read).await?;
    let since = revision(&resp);
    let first = |i| range_at(&resp, i).and_then(|g| g.kvs().first().cloned());
    if first(0).is_none() {
        return Ok(State::Gone);
    }
    let lock = first(1);
    if let Some(lock) = &lock
        && lock.value() == value
    {
        return Ok(State::Granted(lock.mod_revision()));
    }
    if let Some(pred) = first(2) {
        return Ok(State::Wait {
            target: pred.key().to_vec(),
            since,
        });
    }
    Ok(match lock {
        None => State::Free,
        Some(_) => State::Wait {
            target: layout.lock.clone(),
            since,
        },
    })
}

fn session_lost(key: &crate::Key) -> Error {
    Error::SessionLost {
        key: key.to_string(),
        reason: "this waiter's queue entry vanished (its session lease expired or \
                 someone deleted it)"
            .into(),
    }
}

pub(crate) fn internal() -> Error {
    Error::Backend {
        backend: "etcd",
        op: "lock",
        source: "internal error: the attempt was already used".into(),
    }
}
