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
//! its patience (a tenth of the TTL, at most a second: `session::margin`): a crash takes a TTL
//! to show anyway, and short waits, the common case under contention, then
//! cost etcd no watch at all. When patience runs out the waiter re-reads
//! the queue once and watches from that read's revision, so no deletion
//! slips by. The enqueue txn reads nothing, so its cost does not grow with
//! the queue.

//!
//! The wait is a state machine over [`Step`]: listen for a [`Signal`],
//! re-read the queue (a [`Position`]), or try to take the lock key, until
//! a [`Grant`].

use std::pin::Pin;
use std::sync::Arc;

use etcd_client::{Compare, CompareOp, Txn};
use tokio::time::Sleep;

use super::attempt::LockAttempt;
use super::error::{EtcdError, EtcdResult};
use super::held::{Behind, Grant};
use super::keys::{passed_along, prefix_end};
use super::place::{Place, Position};
use super::request::{put_leased, revision};
use super::session::{Lease, margin};
use super::shared_watch::Listener;
use super::watch::{Subscription, WatchMsg};
use crate::fairness::Fairness;
use crate::{Error, observe};

/// The outcome of the enqueue txn.
enum Enqueued {
    /// The lock was free (fair: and nobody queued): taken at once.
    Granted(Grant),
    /// Queued at `my_rev`.
    Queued {
        my_rev: i64,
        lease: Arc<Lease>,
        own: Listener,
        own_watch: OwnWatch,
    },
}

/// How the waiter listens to the locker's watch of its own queue keys.
enum OwnWatch {
    /// It was open before the enqueue: no touch can have been missed.
    WasOpen,
    /// It was opened after the enqueue: re-read once to close the gap.
    OpenedAfter,
}

/// What a queued waiter does next.
enum Step {
    /// Wait for a [`Signal`].
    Listen,
    /// Re-read the queue.
    Read(Read),
    /// Try to take the lock key, which is free for us.
    Take,
}

/// Which re-read of the queue.
enum Read {
    /// Something changed, or our view may be stale.
    Again,
    /// Patience ran out before anything made us read: waiters queued
    /// together get patient together, so such reads take one of the
    /// locker's few re-read permits (etcd load, and memory for requests in
    /// flight).
    Patient,
}

/// What ended a wait.
enum Signal {
    /// Fair: the releasing holder handed us the lock key.
    Handed { token: i64, behind: Behind },
    /// Unfair: the lock key was freed for us.
    Woken,
    /// What we watch changed, or the watch restarted: re-read.
    Changed,
    /// Patience ran out with nothing to watch yet: re-read.
    Patient,
}

/// What a waiter listens to: its locker's watch of its own queue keys, and
/// once patient, the deletion of `target` (its predecessor or the lock key).
struct Watching {
    own: Listener,
    /// What to watch once patient, and from which revision: learnt by the
    /// first re-read (the enqueue reads nothing, to stay O(1) in etcd).
    target: Option<(Vec<u8>, i64)>,
    sub: Option<Subscription>,
}

/// Waits in the queue until granted; `queue_key` is the attempt's queue
/// key. Request futures and the enqueue are awaited boxed (`Box::pin`):
/// this future lives as long as a lock waits.
pub(crate) async fn acquire(attempt: &mut LockAttempt, queue_key: &[u8]) -> EtcdResult<Grant> {
    let (my_rev, lease, own, own_watch) = match Box::pin(enqueue(attempt, queue_key)).await? {
        Enqueued::Granted(grant) => return Ok(grant),
        Enqueued::Queued {
            my_rev,
            lease,
            own,
            own_watch,
        } => (my_rev, lease, own, own_watch),
    };
    observe::queued(None);
    let state = Arc::clone(&attempt.state);
    let mut watching = Watching {
        own,
        target: None,
        sub: None,
    };
    let patience = tokio::time::sleep(margin(state.config.ttl()));
    tokio::pin!(patience);
    let in_line = InLine {
        queue_key,
        my_rev,
        lease,
    };
    let mut step = match own_watch {
        OwnWatch::WasOpen => Step::Listen,
        OwnWatch::OpenedAfter => Step::Read(Read::Again),
    };
    let grant = loop {
        step = match step {
            Step::Listen => {
                let place = in_line.place(attempt);
                match watching.signal(&place, patience.as_mut()).await? {
                    Signal::Handed { token, behind } => {
                        break in_line.grant(token, Some(my_rev), behind);
                    }
                    Signal::Woken => Step::Take,
                    Signal::Changed => Step::Read(Read::Again),
                    Signal::Patient => Step::Read(Read::Patient),
                }
            }
            Step::Read(read) => {
                let place = in_line.place(attempt);
                let position = match read {
                    Read::Patient => {
                        let _permit = state.watches.rereads.acquire().await;
                        Box::pin(place.check_until_answered()).await?
                    }
                    Read::Again => Box::pin(place.check_until_answered()).await?,
                };
                match position {
                    Position::Granted { token, behind } => {
                        break in_line.grant(token, Some(my_rev), behind);
                    }
                    Position::Gone => return Err(session_lost(attempt)),
                    Position::Wait { target, since } => {
                        watching.follow(target, since);
                        Step::Listen
                    }
                    Position::Free => Step::Take,
                }
            }
            Step::Take => {
                let txn = in_line.place(attempt).take();
                let resp = Box::pin(attempt.write_hedged("acquire", &in_line.lease, txn)).await?;
                if resp.succeeded() {
                    // Fair keeps its queue key until release (it heads the
                    // queue); unfair deleted it in the same txn.
                    let queue_rev = state.fairness.is_fair().then_some(my_rev);
                    break in_line.grant(revision(&resp), queue_rev, Behind::LookUp);
                }
                // Someone barged in, or we are no longer queued: re-read.
                Step::Read(Read::Again)
            }
        };
    };
    drop(watching);
    if grant.lease.lost.is_cancelled() || grant.lease.expiry.has_passed() {
        // Never report a lock held on a lease we know or presume gone (etcd
        // #11456): e.g. this process was paused past its TTL while queued.
        return Err(session_lost(attempt));
    }
    Ok(grant)
}

/// What stays fixed while a waiter is in line.
struct InLine<'k> {
    queue_key: &'k [u8],
    /// The revision of the enqueue txn: our queue key's create revision.
    my_rev: i64,
    lease: Arc<Lease>,
}

impl InLine<'_> {
    fn place<'a>(&'a self, attempt: &'a LockAttempt) -> Place<'a> {
        Place {
            attempt,
            lease: &self.lease,
            queue_key: self.queue_key,
            my_rev: self.my_rev,
        }
    }

    fn grant(&self, token: i64, queue_rev: Option<i64>, behind: Behind) -> Grant {
        Grant {
            token,
            queue_rev,
            behind,
            lease: Arc::clone(&self.lease),
        }
    }
}

impl Watching {
    /// Waits for the next signal. Once `patience` has run out, also
    /// watches the target (or, with none known yet, asks for a read).
    async fn signal(
        &mut self,
        place: &Place<'_>,
        mut patience: Pin<&mut Sleep>,
    ) -> EtcdResult<Signal> {
        if patience.is_elapsed() && self.sub.is_none() {
            match &self.target {
                Some((key, since)) => self.sub = Some(Box::pin(place.watch(key, *since)).await?),
                None => return Ok(Signal::Patient),
            }
        }
        let (attempt, my_rev) = (place.attempt, place.my_rev);
        loop {
            tokio::select! {
                msg = self.own.recv() => match msg {
                    WatchMsg::Events { events } => {
                        let mut woken = false;
                        // Our queue key's name may have been used before
                        // (see `slots.rs`): only changes after our enqueue
                        // are ours.
                        // The watch sends puts only (see `shared_watch.rs`): a
                        // queue key that vanishes is found by the lease's loss
                        // or the patient re-read.
                        for ev in events.iter().filter(|e| e.key == place.queue_key && e.mod_revision > my_rev) {
                            if ev.create_revision == my_rev {
                                match attempt.state.fairness {
                                    Fairness::Fair => {
                                        let passed = passed_along(&attempt.keys, &attempt.value, &ev.value);
                                        return Ok(Signal::Handed {
                                            token: ev.mod_revision,
                                            behind: Behind::Passed(passed),
                                        });
                                    }
                                    Fairness::Unfair => woken = true,
                                }
                            }
                        }
                        if woken {
                            return Ok(Signal::Woken);
                        }
                    }
                    WatchMsg::Ended(_) => {
                        self.own = Box::pin(listen_own(attempt)).await?;
                        return Ok(Signal::Changed);
                    }
                    WatchMsg::Created => {}
                },
                () = place.lease.lost.cancelled() => return Err(Error::SessionLost {
                    key: attempt.key.to_string(),
                    reason: "the session lease could not be renewed for a whole TTL".into(),
                }.into()),
                () = &mut patience, if self.sub.is_none() => match &self.target {
                    Some((key, since)) => self.sub = Some(Box::pin(place.watch(key, *since)).await?),
                    None => return Ok(Signal::Patient),
                },
                msg = next_msg(&mut self.sub) => match msg {
                    WatchMsg::Events { events } => {
                        let gone = self.target.as_ref().map(|t| t.0.as_slice());
                        if events.iter().any(|e| !e.put && Some(e.key.as_slice()) == gone) {
                            return Ok(Signal::Changed);
                        }
                    }
                    WatchMsg::Ended(_) => {
                        self.sub = None;
                        return Ok(Signal::Changed);
                    }
                    WatchMsg::Created => {}
                },
            }
        }
    }

    /// Watches `target` from revision `since` from now on (once patient).
    fn follow(&mut self, target: Vec<u8>, since: i64) {
        if self.target.as_ref().is_none_or(|(old, _)| *old != target) {
            self.sub = None; // watch the new target (once patient)
        }
        self.target = Some((target, since));
    }
}

/// Tries to take the free lock key (fair: only if nobody is queued), or
/// queues under `queue_key`, in one txn.
async fn enqueue(attempt: &mut LockAttempt, queue_key: &[u8]) -> EtcdResult<Enqueued> {
    let state = Arc::clone(&attempt.state);
    let (keys, value) = (attempt.keys.clone(), attempt.value.clone());

    // Touches arrive on the locker's long-lived watch of its own queue keys.
    // If it is open, subscribe before enqueueing so no touch can be missed;
    // if not, open it after (a locker that never waits never watches) and
    // close the gap with one read.
    let own_prefix = keys.locker_queue(&state.id);
    let own_end = prefix_end(&own_prefix);
    let open_own = Box::pin(state.watches.existing(&own_prefix, Some(&own_end))).await;

    let mut free = vec![Compare::create_revision(
        keys.lock.clone(),
        CompareOp::Equal,
        0,
    )];
    if state.fairness.is_fair() {
        free.push(Compare::create_revision(keys.queue.clone(), CompareOp::Equal, 0).with_prefix());
    }
    let enqueue = |lease: i64| {
        Txn::new()
            .when(free.clone())
            .and_then([put_leased(&keys.lock, &value, lease)])
            .or_else([put_leased(queue_key, &value, lease)])
    };
    let (resp, lease) = Box::pin(attempt.write_with_lease("enqueue", enqueue)).await?;
    let my_rev = revision(&resp);
    if resp.succeeded() {
        return Ok(Enqueued::Granted(Grant {
            token: my_rev,
            queue_rev: None,
            behind: Behind::Nobody,
            lease,
        }));
    }
    let (own, own_watch) = match open_own {
        Some(listener) => {
            state.watches.touch(&own_prefix, Some(&own_end)).await;
            (listener, OwnWatch::WasOpen)
        }
        None => (
            Box::pin(state.watches.listen(&own_prefix, Some(&own_end))).await?,
            OwnWatch::OpenedAfter,
        ),
    };
    Ok(Enqueued::Queued {
        my_rev,
        lease,
        own,
        own_watch,
    })
}

/// Subscribes anew to the locker's watch of its own queue keys.
async fn listen_own(attempt: &LockAttempt) -> EtcdResult<Listener> {
    let own_prefix = attempt.keys.locker_queue(&attempt.state.id);
    let own_end = prefix_end(&own_prefix);
    attempt
        .state
        .watches
        .listen(&own_prefix, Some(&own_end))
        .await
}

/// The next message of an open subscription; never ready without one.
async fn next_msg(sub: &mut Option<Subscription>) -> WatchMsg {
    match sub {
        Some(sub) => sub.recv().await,
        None => std::future::pending().await,
    }
}

fn session_lost(attempt: &LockAttempt) -> EtcdError {
    EtcdError::Public(Error::SessionLost {
        key: attempt.key.to_string(),
        reason: "this waiter's queue entry vanished (its session lease expired or \
                 someone deleted it)"
            .into(),
    })
}
