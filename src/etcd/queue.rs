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
//! Either way one release wakes one waiter, whatever the queue length, and
//! a waiter costs etcd nothing while it waits: the handoff finds it even if
//! waiters ahead of it vanish, since a release reads the queue head anew
//! when its successor is gone.
//!
//! What the handoff cannot cover is a lock freed with nobody to hand it on:
//! a holder whose lease expired or was revoked, or a woken unfair waiter
//! that gave up before retrying (a waiter that gives up serves a free lock
//! to the first in line, see `release::serve_if_free`, but a crashed one
//! cannot). For that a waiter watches its predecessor's queue key (or,
//! first in line, the lock key) for deletion, but only once it has waited
//! [`patience`] (a tenth of the TTL, at most a second): a crash takes a TTL
//! to show anyway, and short waits, the common case under contention, then
//! cost etcd no watch at all. When patience runs out the waiter re-reads
//! the queue once and watches from that read's revision, so no deletion
//! slips by. The enqueue txn reads nothing, so its cost does not grow with
//! the queue.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, GetResponse, SortOrder, SortTarget, Txn, TxnOp};

use super::keys::{is_waiter, prefix_end};
use super::locker::{Attempt, Inner, put_leased, range_at, revision};
use super::release::{Next, passed_along};
use super::session::{FIRST_BACKOFF, Lease};
use super::shared_watch::Listener;
use super::watch::{Subscription, Target, WatchMsg};
use crate::{Error, LockGuard, Result};

/// How many queue entries ahead one read looks at for the nearest waiter.
const AHEAD_BATCH: i64 = 8;

/// How long a waiter waits before it also watches its predecessor.
pub(crate) fn patience(ttl: Duration) -> Duration {
    (ttl / 10).min(Duration::from_secs(1))
}

/// What a re-read of the queue found.
enum State {
    /// The lock key holds our value: a holder handed it to us, with the
    /// waiters behind us that it passed along.
    Granted(i64, Next),
    /// Our queue key is gone: the session lease expired or it was deleted.
    Gone,
    /// Wait for `target` to be deleted after revision `since`.
    Wait { target: Vec<u8>, since: i64 },
    /// The lock key is free and we may take it (fair: we are first in line).
    Free,
}

/// The outcome of the enqueue txn.
enum Enqueued {
    /// The lock was free (fair: and nobody queued): taken at once.
    Granted(LockGuard),
    /// Queued at `my_rev`.
    Queued {
        my_rev: i64,
        lease: Arc<Lease>,
        own: Listener,
        /// The own-keys watch was opened after the enqueue: re-read once.
        recheck: bool,
    },
}

/// Waits in the queue until granted. Request futures and the enqueue are
/// awaited boxed (`Box::pin`), and the wait keeps no copies of the
/// attempt's keys: this future lives as long as a lock waits.
pub(crate) async fn acquire(slot: &mut Option<Attempt>) -> Result<LockGuard> {
    let (my_rev, lease, mut own, mut recheck) = match Box::pin(enqueue(slot)).await? {
        Enqueued::Granted(guard) => return Ok(guard),
        Enqueued::Queued {
            my_rev,
            lease,
            own,
            recheck,
        } => (my_rev, lease, own, recheck),
    };
    crate::observe::queued(None);
    let inner = Arc::clone(&slot.as_ref().ok_or_else(internal)?.inner);
    let fair = inner.fair;
    // What to watch once patient, and from which revision: learnt by the
    // first re-read (the enqueue reads nothing, to stay O(1) in etcd).
    let mut target: Option<(Vec<u8>, i64)> = None;
    let mut sub: Option<Subscription> = None;
    let patience = tokio::time::sleep(patience(inner.config.ttl()));
    tokio::pin!(patience);
    // Woken (unfair): try the take txn before reading anything.
    let mut woken = false;
    // Patience ran out before anything made us read the queue.
    let mut first_read = false;

    let (token, queue_rev, next) = 'granted: loop {
        let a = slot.as_ref().ok_or_else(internal)?;
        let w = Waiter {
            a,
            lease: &lease,
            my_rev,
        };
        if patience.is_elapsed() && sub.is_none() {
            match &target {
                Some((key, since)) => sub = Some(Box::pin(w.watch(key, *since)).await?),
                None => (recheck, first_read) = (true, true),
            }
        }
        let queue_key = w.queue_key()?;
        while !recheck {
            tokio::select! {
                msg = own.recv() => match msg {
                    WatchMsg::Events { events } => {
                        // Our queue key's name may have been used before
                        // (see `slots.rs`): only changes after our enqueue
                        // are ours.
                        for ev in events.iter().filter(|e| e.key == queue_key && e.mod_revision > my_rev) {
                            if !ev.put {
                                return Err(session_lost(a));
                            }
                            if ev.create_revision == my_rev {
                                if fair {
                                    let next = passed_along(&a.layout, &a.value, &ev.value);
                                    break 'granted (ev.mod_revision, Some(my_rev), Next::Known(next));
                                }
                                // Woken: the key was freed for us.
                                (recheck, woken) = (true, true);
                            }
                        }
                    }
                    WatchMsg::Ended(_) => {
                        own = Box::pin(listen_own(a)).await?;
                        recheck = true;
                    }
                    WatchMsg::Created => {}
                },
                () = lease.lost.cancelled() => return Err(Error::SessionLost {
                    key: a.key.to_string(),
                    reason: "the session lease could not be renewed for a whole TTL".into(),
                }),
                () = &mut patience, if sub.is_none() => match &target {
                    Some((key, since)) => sub = Some(Box::pin(w.watch(key, *since)).await?),
                    None => (recheck, first_read) = (true, true),
                },
                msg = next(&mut sub) => match msg {
                    WatchMsg::Events { events } => {
                        let gone = target.as_ref().map(|t| t.0.as_slice());
                        recheck |= events.iter().any(|e| !e.put && Some(e.key.as_slice()) == gone);
                    }
                    WatchMsg::Ended(_) => (sub, recheck) = (None, true),
                    WatchMsg::Created => {}
                },
            }
        }
        recheck = false;
        loop {
            let w = Waiter {
                a: slot.as_ref().ok_or_else(internal)?,
                lease: &lease,
                my_rev,
            };
            let state = if std::mem::take(&mut woken) {
                State::Free
            } else if std::mem::take(&mut first_read) {
                // Waiters queued together get patient together: bound how
                // many of them re-read at once (etcd load, and memory for
                // requests in flight).
                let _permit = inner.shared.rereads.acquire().await;
                Box::pin(w.check_until_answered()).await?
            } else {
                Box::pin(w.check_until_answered()).await?
            };
            match state {
                State::Granted(token, next) => break 'granted (token, Some(my_rev), next),
                State::Gone => return Err(session_lost(w.a)),
                State::Wait { target: t, since } => {
                    if target.as_ref().is_none_or(|(old, _)| *old != t) {
                        sub = None; // watch the new target (once patient)
                    }
                    target = Some((t, since));
                    break;
                }
                State::Free => {
                    let txn = w.take()?;
                    let attempt = slot.as_mut().ok_or_else(internal)?;
                    let resp = Box::pin(attempt.write("acquire", &lease, txn)).await?;
                    if resp.succeeded() {
                        let token = revision(&resp);
                        // Fair keeps its queue key until release (it heads the
                        // queue); unfair deleted it in the same txn.
                        break 'granted (token, fair.then_some(my_rev), Next::LookUp);
                    }
                    // Someone barged in, or we are no longer queued: re-read.
                }
            }
        }
    };
    drop(sub);
    if lease.lost.is_cancelled() || lease.expiry.has_passed() {
        // Never report a lock held on a lease we know or presume gone (etcd
        // #11456): e.g. this process was paused past its TTL while queued.
        return Err(session_lost(slot.as_ref().ok_or_else(internal)?));
    }
    let attempt = slot.take().ok_or_else(internal)?;
    Ok(attempt.granted_with(token, queue_rev, lease, next))
}

/// Tries to take the free lock key (fair: only if nobody is queued), or
/// queues, in one txn.
async fn enqueue(slot: &mut Option<Attempt>) -> Result<Enqueued> {
    let attempt = slot.as_mut().ok_or_else(internal)?;
    let inner = Arc::clone(&attempt.inner);
    let (layout, value) = (attempt.layout.clone(), attempt.value.clone());
    let queue_key = attempt.queue_key.clone().ok_or_else(internal)?;

    // Touches arrive on the locker's long-lived watch of its own queue keys.
    // If it is open, subscribe before enqueueing so no touch can be missed;
    // if not, open it after (a locker that never waits never watches) and
    // close the gap with one read.
    let own_prefix = layout.locker_queue(&inner.id);
    let own_end = prefix_end(&own_prefix);
    let open_own = Box::pin(inner.shared.existing(&own_prefix, Some(&own_end))).await;

    let mut free = vec![Compare::create_revision(
        layout.lock.clone(),
        CompareOp::Equal,
        0,
    )];
    if inner.fair {
        free.push(
            Compare::create_revision(layout.queue.clone(), CompareOp::Equal, 0).with_prefix(),
        );
    }
    let enqueue = |lease: i64| {
        Txn::new()
            .when(free.clone())
            .and_then([put_leased(&layout.lock, &value, lease)])
            .or_else([put_leased(&queue_key, &value, lease)])
    };
    let (resp, lease) = Box::pin(attempt.write_with_lease("enqueue", enqueue)).await?;
    let my_rev = revision(&resp);
    if resp.succeeded() {
        let attempt = slot.take().ok_or_else(internal)?;
        return Ok(Enqueued::Granted(
            attempt.granted(my_rev, None, lease, false),
        ));
    }
    let (own, recheck) = match open_own {
        Some(listener) => {
            inner.shared.touch(&own_prefix, Some(&own_end)).await;
            (listener, false)
        }
        None => (
            Box::pin(inner.shared.listen(&own_prefix, Some(&own_end))).await?,
            true,
        ),
    };
    Ok(Enqueued::Queued {
        my_rev,
        lease,
        own,
        recheck,
    })
}

/// Subscribes anew to the locker's watch of its own queue keys.
async fn listen_own(a: &Attempt) -> Result<Listener> {
    let own_prefix = a.layout.locker_queue(&a.inner.id);
    let own_end = prefix_end(&own_prefix);
    a.inner.shared.listen(&own_prefix, Some(&own_end)).await
}

/// The next message of an open subscription; never ready without one.
async fn next(sub: &mut Option<Subscription>) -> WatchMsg {
    match sub {
        Some(sub) => sub.recv().await,
        None => std::future::pending().await,
    }
}

/// One queued waiter, borrowing its attempt.
struct Waiter<'a> {
    a: &'a Attempt,
    lease: &'a Lease,
    my_rev: i64,
}

impl Waiter<'_> {
    fn inner(&self) -> &Inner {
        &self.a.inner
    }

    fn queue_key(&self) -> Result<&[u8]> {
        self.a.queue_key.as_deref().ok_or_else(internal)
    }

    /// Watches `key` (our predecessor's queue key, or the lock key) for its
    /// deletion after revision `since`. Replays from there, so no deletion can slip by;
    /// such a watch may start unsynced (~100 ms late), which only matters
    /// when a lock was freed without a handoff.
    async fn watch(&self, key: &[u8], since: i64) -> Result<Subscription> {
        let key = key.to_vec();
        self.inner()
            .hub
            .subscribe(Target {
                key,
                range_end: None,
                start_revision: Some(since + 1),
            })
            .await
    }

    /// The queue entries created before `below`, nearest first, names
    /// and leases only.
    fn ahead(&self, below: i64) -> (Vec<u8>, GetOptions) {
        let opts = GetOptions::new()
            .with_prefix()
            .with_max_create_revision((below - 1).max(1))
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(AHEAD_BATCH)
            .with_keys_only();
        (self.a.layout.queue.clone(), opts)
    }

    /// Our predecessor: the nearest fairlock waiter ahead of us in
    /// `first_batch` (read by [`Waiter::ahead`]), reading further while
    /// entries that are not waiters (see `keys::is_waiter`) fill a batch.
    async fn predecessor(&self, first_batch: Option<GetResponse>) -> Result<Option<Vec<u8>>> {
        let queue = &self.a.layout.queue;
        let mut batch = first_batch;
        loop {
            let kvs = batch.as_ref().map_or(&[][..], |g| g.kvs());
            if let Some(pred) = kvs.iter().find(|kv| is_waiter(queue, kv.key(), kv.lease())) {
                return Ok(Some(pred.key().to_vec()));
            }
            match kvs.last() {
                Some(oldest) if kvs.len() as i64 == AHEAD_BATCH => {
                    let (key, opts) = self.ahead(oldest.create_revision());
                    batch = Some(self.inner().get("queue check", key, opts).await?);
                }
                _ => return Ok(None),
            }
        }
    }

    /// Re-reads our queue key, the lock key and our predecessor in one
    /// read-only txn.
    async fn check(&self) -> Result<State> {
        let layout = &self.a.layout;
        let (queue, ahead) = self.ahead(self.my_rev);
        let read = Txn::new().and_then([
            TxnOp::get(self.queue_key()?.to_vec(), None),
            TxnOp::get(layout.lock.clone(), None),
            TxnOp::get(queue, Some(ahead)),
        ]);
        let resp = self.inner().txn("queue check", read).await?;
        let since = revision(&resp);
        let first = |i| range_at(&resp, i).and_then(|g| g.kvs().first().cloned());
        let Some(mine) = first(0).filter(|kv| kv.create_revision() == self.my_rev) else {
            return Ok(State::Gone);
        };
        let lock = first(1);
        if let Some(lock) = &lock
            && lock.value() == self.a.value
        {
            let next = passed_along(&self.a.layout, &self.a.value, mine.value());
            return Ok(State::Granted(lock.mod_revision(), Next::Known(next)));
        }
        if lock.is_none() && !self.inner().fair {
            return Ok(State::Free); // unfair: take it from any place in line
        }
        if let Some(pred) = self.predecessor(range_at(&resp, 2)).await? {
            return Ok(State::Wait {
                target: pred,
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

    /// [`Waiter::check`], retried with backoff while etcd does not answer
    /// (e.g. thousands of waiters re-reading at once): a waiter gives up
    /// only when its session lease is lost, as it would while idle.
    async fn check_until_answered(&self) -> Result<State> {
        let mut backoff = FIRST_BACKOFF;
        loop {
            match self.check().await {
                Err(e) if self.lease.lost.is_cancelled() => return Err(e),
                Err(_) => self.lease.pause(&mut backoff).await,
                state => return state,
            }
        }
    }

    /// The txn that creates the lock key if it is still free and we are
    /// still queued; unfair also leaves the queue in it.
    ///
    /// A fair waiter takes it only after a read (at or after its enqueue)
    /// found no waiter ahead of it, and that stays true: whatever queues
    /// later is behind it. So the txn needs no compare on the queue, and
    /// entries that are not waiters cannot block it.
    fn take(&self) -> Result<Txn> {
        let l = &self.a.layout;
        let queue_key = self.queue_key()?;
        let when = [
            Compare::create_revision(l.lock.clone(), CompareOp::Equal, 0),
            Compare::create_revision(queue_key.to_vec(), CompareOp::Equal, self.my_rev),
        ];
        let mut then = vec![put_leased(&l.lock, &self.a.value, self.lease.id)];
        if !self.inner().fair {
            then.push(TxnOp::delete(queue_key.to_vec(), None));
        }
        Ok(Txn::new().when(when).and_then(then))
    }
}

fn session_lost(a: &Attempt) -> Error {
    Error::SessionLost {
        key: a.key.to_string(),
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
