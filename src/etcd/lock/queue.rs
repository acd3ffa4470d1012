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

use std::sync::Arc;

use super::attempt::LockAttempt;
use super::held::{Behind, Grant};
use super::place::{Place, Position};
use super::waiting::{Signal, Watching};
use crate::etcd::client::error::{EtcdError, EtcdResult};
use crate::etcd::client::request::retry_backoff;
use crate::etcd::client::shared_watch::Listener;
use crate::etcd::protocol::keys::prefix_end;
use crate::etcd::protocol::take;
use crate::etcd::session::handout::{Lease, margin};
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
    let mut watching = Watching::new(own);
    let patience = tokio::time::sleep(margin(state.config.ttl()));
    tokio::pin!(patience);
    let mut in_line = InLine {
        queue_key,
        my_rev,
        lease,
    };
    let mut step = match own_watch {
        OwnWatch::WasOpen => Step::Listen,
        OwnWatch::OpenedAfter => Step::Read(Read::Again),
    };
    let grant = loop {
        let grant = loop {
            step = match step {
                Step::Listen => {
                    let place = in_line.place(attempt);
                    let signal = match watching.signal(&place, patience.as_mut()).await {
                        Ok(signal) => signal,
                        Err(_) if in_line.revive(attempt).await => Signal::Changed,
                        Err(e) => return Err(e),
                    };
                    match signal {
                        Signal::Handed { token, behind } => {
                            break in_line.grant(token, Some(my_rev), behind);
                        }
                        Signal::Woken => Step::Take,
                        Signal::Changed => Step::Read(Read::Again),
                        Signal::Patient => Step::Read(Read::Patient),
                        Signal::LeaseLost if in_line.revive(attempt).await => {
                            Step::Read(Read::Again)
                        }
                        Signal::LeaseLost => return Err(lease_lost(attempt)),
                    }
                }
                Step::Read(read) => {
                    let place = in_line.place(attempt);
                    let checked = match read {
                        Read::Patient => {
                            let _permit = state.watches.rereads.acquire().await;
                            Box::pin(place.check_until_answered()).await
                        }
                        Read::Again => Box::pin(place.check_until_answered()).await,
                    };
                    let position = match checked {
                        Ok(position) => position,
                        // The check gave up because the lease was lost here.
                        Err(_) if in_line.revive(attempt).await => {
                            step = Step::Read(Read::Again);
                            continue;
                        }
                        Err(e) => return Err(e),
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
                    let lease = Arc::clone(&in_line.lease);
                    let resp = match Box::pin(attempt.write_hedged("acquire", &lease, txn)).await {
                        Ok(resp) => resp,
                        // Its compares make a late copy harmless: re-read.
                        Err(_) if in_line.revive(attempt).await => {
                            step = Step::Read(Read::Again);
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    if resp.succeeded() {
                        // Fair keeps its queue key until release (it heads the
                        // queue); unfair deleted it in the same txn.
                        let queue_rev = state.fairness.is_fair().then_some(my_rev);
                        break in_line.grant(resp.revision, queue_rev, Behind::LookUp);
                    }
                    if take::take_refused_by_line(&resp) {
                        return Err(in_use_as_line(attempt));
                    }
                    // Someone barged in, or we are no longer queued: re-read.
                    Step::Read(Read::Again)
                }
            };
        };
        // Never report a lock held on a lease we know or presume gone (etcd
        // #11456): e.g. this process was paused past its TTL while queued.
        // A lease renewed again after it lapsed here is as good as new:
        // re-read to be granted on it.
        if grant.lease.lost.is_cancelled() || grant.lease.expiry.has_passed() {
            if in_line.revive(attempt).await {
                step = Step::Read(Read::Again);
                continue;
            }
            return Err(session_lost(attempt));
        }
        break grant;
    };
    drop(watching);
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

    /// After the lease was lost here: `true` if the session renewed it
    /// again (etcd kept it, see `Session::revive`), so that the waiter keeps
    /// its place in line; `false` if it was not lost, or is gone.
    async fn revive(&mut self, attempt: &mut LockAttempt) -> bool {
        if !self.lease.lost.is_cancelled() {
            return false;
        }
        let Some(lease) = Box::pin(attempt.state.session.revive(&self.lease)).await else {
            return false;
        };
        observe::lease_revived("etcd", format_args!("lease {:x}", lease.id));
        attempt.use_lease(&lease);
        self.lease = lease;
        true
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

    let enqueue = |lease: i64| take::enqueue(&keys, state.fairness, (&value, lease), queue_key);
    let (resp, lease) = Box::pin(attempt.write_with_lease("enqueue", enqueue)).await?;
    let my_rev = resp.revision;
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
        None => {
            // We are in line now: a watch that fails to open for a reason
            // that may pass (a member cut off) is opened again rather than
            // costing the place.
            let mut backoff = retry_backoff();
            let listener = loop {
                match Box::pin(state.watches.listen(&own_prefix, Some(&own_end))).await {
                    Ok(listener) => break listener,
                    Err(e) if e.is_transient() && !lease.lost.is_cancelled() => {
                        lease.pause(&mut backoff).await;
                    }
                    Err(e) => return Err(e),
                }
            };
            (listener, OwnWatch::OpenedAfter)
        }
    };
    Ok(Enqueued::Queued {
        my_rev,
        lease,
        own,
        own_watch,
    })
}

fn lease_lost(attempt: &LockAttempt) -> EtcdError {
    EtcdError::Public(Error::SessionLost {
        key: attempt.key.to_string(),
        reason: "the session lease could not be renewed for a whole TTL".into(),
    })
}

fn in_use_as_line(attempt: &LockAttempt) -> EtcdError {
    EtcdError::Public(crate::shared::in_use_as_line(attempt.key.as_str()))
}

fn session_lost(attempt: &LockAttempt) -> EtcdError {
    EtcdError::Public(Error::SessionLost {
        key: attempt.key.to_string(),
        reason: "this waiter's queue entry vanished (its session lease expired or \
                 someone deleted it)"
            .into(),
    })
}
