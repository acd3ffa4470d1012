//! Waiting in the `_OWNERS_` queue, ordered by create revision; both modes.
//!
//! `lock` first tries to take the lock key in the same txn that would queue
//! it: fair mode only when nobody is queued, unfair mode whenever the key is
//! free (barging). A queued waiter then learns of its turn from the locker's
//! long-lived watch on its own queue keys, where the releasing holder
//! touches the waiter's queue key:
//! - a **fair** waiter has been handed the lock key in that same txn: it
//!   holds the lock (one etcd write per handoff, no read);
//! - an **unfair** waiter has been woken because the key was freed: it tries
//!   to create it, and stays first in line if a newcomer got there first.
//!
//! Either way one release wakes one waiter, whatever the queue length.
//! Meanwhile each waiter watches its predecessor's queue key (or, first in
//! line, the lock key) for deletion, to notice a holder or predecessor that
//! vanished without a handoff (crash, lease expiry, cancellation).

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp};

use super::keys::{Layout, prefix_end};
use super::locker::{Attempt, Inner, put_leased, range_at, revision};
use super::session::Lease;
use super::watch::{Target, WatchMsg};
use crate::{Error, Key, LockGuard, Result};

/// What a re-read of the queue found.
enum State {
    /// The lock key holds our value: a holder handed it to us.
    Granted(i64),
    /// Our queue key is gone: the session lease expired or it was deleted.
    Gone,
    /// Wait for `target` to be deleted after revision `since`.
    Wait { target: Vec<u8>, since: i64 },
    /// The lock key is free and we may take it (fair: we are first in line).
    Free,
}

/// One queued waiter.
struct Waiter<'a> {
    inner: &'a Inner,
    layout: &'a Layout,
    queue_key: &'a [u8],
    value: &'a [u8],
    lease: &'a Lease,
    my_rev: i64,
    fair: bool,
}

/// Request futures are awaited boxed (`Box::pin`): inline, they would make
/// this future, which lives as long as a lock waits, several KiB larger.
pub(crate) async fn acquire(slot: &mut Option<Attempt>) -> Result<LockGuard> {
    let attempt = slot.as_mut().ok_or_else(internal)?;
    let inner = Arc::clone(&attempt.inner);
    let fair = inner.fair;
    let (key, layout, value) = (
        attempt.key.clone(),
        attempt.layout.clone(),
        attempt.value.clone(),
    );
    let queue_key = attempt.queue_key.clone().ok_or_else(internal)?;

    // Touches arrive on the locker's long-lived watch of its own queue keys.
    // If it is open, subscribe before enqueueing so no touch can be missed;
    // if not, open it after (a locker that never waits never watches) and
    // close the gap with one read.
    let own_prefix = layout.locker_queue(&inner.id);
    let own_end = prefix_end(&own_prefix);
    let open_own = Box::pin(inner.shared.existing(&own_prefix, Some(&own_end))).await;

    // Take the free lock key (fair: only if nobody is queued), or queue and
    // learn our predecessor, in one txn.
    let mut free = vec![Compare::create_revision(
        layout.lock.clone(),
        CompareOp::Equal,
        0,
    )];
    if fair {
        free.push(
            Compare::create_revision(layout.queue.clone(), CompareOp::Equal, 0).with_prefix(),
        );
    }
    let enqueue = |lease: i64| {
        Txn::new()
            .when(free.clone())
            .and_then([put_leased(&layout.lock, &value, lease)])
            .or_else([
                put_leased(&queue_key, &value, lease),
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
            ])
    };
    let (resp, lease) = Box::pin(attempt.write_with_lease("enqueue", enqueue)).await?;
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
            Box::pin(inner.shared.listen(&own_prefix, Some(&own_end))).await?,
            true,
        ),
    };
    let predecessor = range_at(&resp, 1).and_then(|g| {
        g.kvs()
            .iter()
            .find(|kv| kv.key() != queue_key.as_slice())
            .map(|kv| kv.key().to_vec())
    });
    let w = Waiter {
        inner: &inner,
        layout: &layout,
        queue_key: &queue_key,
        value: &value,
        lease: &lease,
        my_rev,
        fair,
    };
    let mut target = predecessor.unwrap_or_else(|| layout.lock.clone());
    let mut since = my_rev;

    let (token, queue_rev) = 'granted: loop {
        let watch_predecessor = inner.hub.subscribe(Target {
            key: target.clone(),
            range_end: None,
            // Replays from our enqueue: no deletion can slip by. Such a watch
            // may start unsynced (~100 ms late), but it only matters when a
            // predecessor vanishes without a handoff.
            start_revision: Some(since + 1),
        });
        let mut sub = Box::pin(watch_predecessor).await?;
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
                                if fair {
                                    break 'granted (ev.mod_revision, Some(my_rev));
                                }
                                // Woken: the key was freed for us.
                                recheck = true;
                            }
                        }
                    }
                    WatchMsg::Ended(_) => {
                        own = Box::pin(inner.shared.listen(&own_prefix, Some(&own_end))).await?;
                        recheck = true;
                    }
                    WatchMsg::Created => {}
                },
                () = lease.lost.cancelled() => return Err(Error::SessionLost {
                    key: key.to_string(),
                    reason: "the session lease could not be renewed for a whole TTL".into(),
                }),
                msg = sub.recv() => match msg {
                    WatchMsg::Events { events } => {
                        recheck |= events.iter().any(|e| !e.put && e.key == target);
                    }
                    WatchMsg::Ended(_) => recheck = true,
                    WatchMsg::Created => {}
                },
            }
        }
        loop {
            match Box::pin(w.check()).await? {
                State::Granted(token) => break 'granted (token, Some(my_rev)),
                State::Gone => return Err(session_lost(&key)),
                State::Wait {
                    target: t,
                    since: s,
                } => {
                    (target, since) = (t, s);
                    break;
                }
                State::Free => {
                    let txn = w.take();
                    let attempt = slot.as_mut().ok_or_else(internal)?;
                    let resp = Box::pin(attempt.write("acquire", &lease, txn)).await?;
                    if resp.succeeded() {
                        let token = revision(&resp);
                        // Fair keeps its queue key until release (it heads the
                        // queue); unfair deleted it in the same txn.
                        break 'granted (token, fair.then_some(my_rev));
                    }
                }
            }
        }
    };
    if lease.lost.is_cancelled() || lease.expiry.has_passed() {
        // Never report a lock held on a lease we know or presume gone (etcd
        // #11456): e.g. this process was paused past its TTL while queued.
        return Err(session_lost(&key));
    }
    let attempt = slot.take().ok_or_else(internal)?;
    Ok(attempt.granted(token, queue_rev, lease, true))
}

impl Waiter<'_> {
    /// Re-reads our queue key, the lock key and our predecessor in one
    /// read-only txn.
    async fn check(&self) -> Result<State> {
        let read = Txn::new().and_then([
            TxnOp::get(self.queue_key.to_vec(), None),
            TxnOp::get(self.layout.lock.clone(), None),
            TxnOp::get(
                self.layout.queue.clone(),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_max_create_revision((self.my_rev - 1).max(1))
                        .with_sort(SortTarget::Create, SortOrder::Descend)
                        .with_limit(1)
                        .with_keys_only(),
                ),
            ),
        ]);
        let resp = self.inner.txn("queue check", read).await?;
        let since = revision(&resp);
        let first = |i| range_at(&resp, i).and_then(|g| g.kvs().first().cloned());
        if first(0).is_none() {
            return Ok(State::Gone);
        }
        let lock = first(1);
        if let Some(lock) = &lock
            && lock.value() == self.value
        {
            return Ok(State::Granted(lock.mod_revision()));
        }
        if lock.is_none() && !self.fair {
            return Ok(State::Free); // unfair: take it from any place in line
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
                target: self.layout.lock.clone(),
                since,
            },
        })
    }

    /// The txn that creates the lock key if it is still free (fair: and we
    /// are still first in line); unfair also leaves the queue in it.
    fn take(&self) -> Txn {
        let l = &self.layout;
        let mut when = vec![
            Compare::create_revision(l.lock.clone(), CompareOp::Equal, 0),
            Compare::create_revision(self.queue_key.to_vec(), CompareOp::Equal, self.my_rev),
        ];
        let mut then = vec![put_leased(&l.lock, self.value, self.lease.id)];
        if self.fair {
            when.push(
                Compare::create_revision(l.queue.clone(), CompareOp::Greater, self.my_rev - 1)
                    .with_prefix(),
            );
        } else {
            then.push(TxnOp::delete(self.queue_key.to_vec(), None));
        }
        Txn::new().when(when).and_then(then)
    }
}

fn session_lost(key: &Key) -> Error {
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
