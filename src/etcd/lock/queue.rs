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
//! a holder whose lease ended, or a woken unfair waiter that gave up before
//! retrying (one that gives up serves a free lock to the first in line, see
//! `release::serve_if_free`; a crashed one cannot). For that a waiter
//! joins its locker's vigil over the lock (`session/vigil.rs`) once it has
//! waited its patience (`session::margin`, a tenth of the TTL, at most a
//! second): a crash takes a TTL to show anyway, and short waits, the common
//! case, join nothing. Joining sends nothing; the vigil, one per locker and
//! lock, watches the lock key's deletions and tells the first waiter in
//! line if it is one of its locker's. The enqueue txn reads nothing, so its
//! cost does not grow with the queue; nor does a waiter's wait.
//!
//! The wait is a state machine over [`Step`]: listen for a [`Signal`]
//! (`listen.rs`), re-read the queue (a [`Position`]), or try to take the
//! lock key, until a [`Grant`]. Every failed step goes to
//! [`Step::Failed`]: a failure caused by the lease lapsing here costs the
//! waiter nothing if the session renews the lease (`Session::revive`); any
//! other ends the wait. Below it, the [`Waiter`]'s reads: where it stands
//! (one read-only txn of its queue key, the lock key and the entries ahead
//! of it), and the txn that takes a free lock key.

use std::sync::Arc;

use etcd_client::GetResponse;

use super::attempt::LockAttempt;
use super::held_lock::{Behind, Grant};
use super::listen::{
    InLine, OwnWatch, Queued, Signal, Watching, own_watch_after, own_watch_before,
};
use crate::etcd::client::error::{ENTRY_GONE, EtcdError, EtcdResult, LEASE_LOST};
use crate::etcd::client::retry::{Budget, Retrying};
use crate::etcd::protocol::ops::Repeatable;
use crate::etcd::protocol::queue::{self, Ahead};
use crate::etcd::protocol::take;
use crate::etcd::session::handout::{Lease, margin};
use crate::etcd::session::state::LockerState;
use crate::util::observe;

/// The outcome of the enqueue txn.
enum Enqueued {
    /// The lock was free (fair: and nobody queued): taken at once.
    Granted(Grant),
    /// Queued.
    Queued(InLine),
}

/// What a queued waiter does next.
enum Step {
    /// Wait for a [`Signal`].
    Listen,
    /// Re-read the queue: in full ([`Read::Place`]) or a glance
    /// ([`Read::Glance`]).
    Read(Read),
    /// Try to take the lock key, which is free for us.
    Take,
    /// Granted: holds once its lease is known good.
    Granted(Grant),
    /// A step failed with this error, perhaps because the lease lapsed
    /// here.
    Failed(EtcdError),
}

/// Waits in the queue until granted; `queue_key` is the attempt's queue
/// key. Request futures and the enqueue are awaited boxed (`Box::pin`):
/// this future lives as long as a lock waits.
pub(crate) async fn acquire(attempt: &mut LockAttempt, queue_key: &[u8]) -> EtcdResult<Grant> {
    match Box::pin(enqueue(attempt, queue_key)).await? {
        Enqueued::Granted(grant) => Ok(grant),
        Enqueued::Queued(in_line) => wait_in_line(attempt, queue_key, in_line).await,
    }
}

/// Waits in the queue, from the enqueue on, until granted.
pub(super) async fn wait_in_line(
    attempt: &mut LockAttempt,
    queue_key: &[u8],
    in_line: InLine,
) -> EtcdResult<Grant> {
    let InLine {
        my_rev,
        lease,
        own,
        own_watch,
    } = in_line;
    observe::queued(None);
    let mut watching = Watching::new(own);
    let patience = tokio::time::sleep(margin(attempt.state.config.ttl()));
    tokio::pin!(patience);
    let mut waiter = Waiter {
        attempt,
        queue_key,
        my_rev,
        lease,
    };
    let mut step = match own_watch {
        OwnWatch::WasOpen => Step::Listen,
        OwnWatch::OpenedAfter => Step::Read(Read::Glance),
    };
    loop {
        step = match step {
            Step::Listen => match watching.signal(&waiter.entry(), patience.as_mut()).await {
                Ok(Signal::Handed { token, behind }) => {
                    Step::Granted(waiter.grant(token, Some(my_rev), behind))
                }
                Ok(Signal::Woken) => Step::Take,
                Ok(Signal::Changed) => Step::Read(Read::Place),
                Ok(Signal::Reopened) => Step::Read(Read::Glance),
                Ok(Signal::LeaseLost) => {
                    Step::Failed(EtcdError::session_lost(&waiter.attempt.key, LEASE_LOST))
                }
                Err(e) => Step::Failed(e),
            },
            Step::Read(read) => match Box::pin(waiter.read(read)).await {
                Ok(Position::Granted { token, behind }) => {
                    Step::Granted(waiter.grant(token, Some(my_rev), behind))
                }
                Ok(Position::Gone) => {
                    return Err(EtcdError::session_lost(&waiter.attempt.key, ENTRY_GONE));
                }
                Ok(Position::Wait) => Step::Listen,
                Ok(Position::Free) => Step::Take,
                // The read gave up because the lease was lost here.
                Err(e) => Step::Failed(e),
            },
            Step::Take => {
                let (txn, lease) = (waiter.take(), Arc::clone(&waiter.lease));
                match Box::pin(waiter.attempt.write("acquire", &lease, txn)).await {
                    Ok(resp) if resp.succeeded() => {
                        // Fair keeps its queue key until release (it heads
                        // the queue); unfair deleted it in the same txn.
                        let fair = waiter.attempt.state.fairness.is_fair();
                        Step::Granted(waiter.grant(
                            resp.revision,
                            fair.then_some(my_rev),
                            Behind::LookUp,
                        ))
                    }
                    Ok(resp) if take::take_refused_by_line(&resp) => {
                        return Err(in_use_as_line(waiter.attempt));
                    }
                    // Someone barged in, or we are no longer queued: re-read.
                    Ok(_) => Step::Read(Read::Place),
                    // Its compares make a late copy harmless.
                    Err(e) => Step::Failed(e),
                }
            }
            // Never report a lock held on a lease we know or presume gone
            // (etcd #11456): e.g. this process was paused past its TTL
            // while queued.
            Step::Granted(grant)
                if grant.lease.lost.is_cancelled() || grant.lease.expiry.has_passed() =>
            {
                Step::Failed(EtcdError::session_lost(&waiter.attempt.key, ENTRY_GONE))
            }
            Step::Granted(grant) => return Ok(grant),
            // A lease renewed again after it lapsed here is as good as
            // new: the waiter keeps its place and re-reads, to be granted
            // on it.
            Step::Failed(e) => match waiter.revive().await {
                true => Step::Read(Read::Place),
                false => return Err(e),
            },
        };
    }
}

/// Tries to take the free lock key (fair: only if nobody is queued), or
/// queues under `queue_key`, in one txn.
async fn enqueue(attempt: &mut LockAttempt, queue_key: &[u8]) -> EtcdResult<Enqueued> {
    let state = Arc::clone(&attempt.state);
    let (keys, value) = (attempt.keys.clone(), attempt.value.clone());
    let open_own = own_watch_before(&state, &keys, queue_key).await;
    let enqueue = |lease: i64| take::enqueue(&keys, state.fairness, (&value, lease), queue_key);
    let (resp, lease) = Box::pin(attempt.write_with_lease("enqueue", enqueue)).await?;
    if resp.succeeded() {
        return Ok(Enqueued::Granted(Grant {
            token: resp.revision,
            queue_rev: None,
            behind: Behind::Nobody,
            lease,
        }));
    }
    let in_line =
        own_watch_after(&state, (&keys, queue_key), open_own, resp.revision, lease).await?;
    Ok(Enqueued::Queued(in_line))
}

fn in_use_as_line(attempt: &LockAttempt) -> EtcdError {
    EtcdError::Public(crate::semantics::mixed_use::in_use_as_line(
        attempt.key.as_str(),
    ))
}

/// Where a re-read of the queue found the waiter.
enum Position {
    /// The lock key holds our value: a holder handed it to us, with the
    /// waiters behind us that it passed along.
    Granted { token: i64, behind: Behind },
    /// Our queue key is gone: the session lease expired or it was deleted.
    Gone,
    /// Wait: a waiter ahead of us, or the lock held.
    Wait,
    /// The lock key is free and we may take it (fair: we are first in line).
    Free,
}

/// How much of the queue a re-read reads.
#[derive(Clone, Copy)]
enum Read {
    /// The waiter's queue key, the lock key and the entries ahead of it,
    /// to tell whether it is first in line: etcd reads the whole queue
    /// to answer that (see `protocol/queue.rs`), so only a waiter told
    /// that something changed reads it.
    Place,
    /// The waiter's queue key and the lock key only (two keys, whatever
    /// the queue's length): whether it was granted or woken before its
    /// locker's watch opened, and whether the lock is held (a release will
    /// then hand it on, or the vigil tells of a lock freed without one).
    /// Thousands of waiters that queue at once each glance; one that finds
    /// the lock free reads its place in full.
    Glance,
}

/// A queued waiter: its attempt, its queue key (created at `my_rev`) and
/// the lease that key is bound to.
struct Waiter<'a> {
    attempt: &'a mut LockAttempt,
    queue_key: &'a [u8],
    my_rev: i64,
    lease: Arc<Lease>,
}

impl Waiter<'_> {
    /// What its listening needs of it (see `listen.rs`).
    fn entry(&self) -> Queued<'_> {
        Queued {
            attempt: self.attempt,
            queue_key: self.queue_key,
            my_rev: self.my_rev,
            lease: &self.lease,
        }
    }

    fn state(&self) -> &LockerState {
        &self.attempt.state
    }

    /// Whether a fairlock waiter is ahead of us, from `first_batch` on,
    /// reading further while entries that are not waiters fill a batch.
    async fn has_predecessor(&self, first_batch: Option<GetResponse>) -> EtcdResult<bool> {
        let queue = &self.attempt.keys.queue;
        let mut batch = first_batch;
        loop {
            let kvs = batch.as_ref().map_or(&[][..], |g| g.kvs());
            match queue::nearest_waiter(queue, kvs) {
                Ahead::Waiter => return Ok(true),
                Ahead::ReadBelow(rev) => {
                    let next = self
                        .state()
                        .get("queue check", queue.clone(), queue::ahead(rev))
                        .await?;
                    batch = Some(next);
                }
                Ahead::Nobody => return Ok(false),
            }
        }
    }

    /// Re-reads our queue key, the lock key and (for [`Read::Place`]) our
    /// predecessor in one read-only txn (see `protocol/queue.rs`).
    async fn check(&self, how: Read) -> EtcdResult<Position> {
        let keys = &self.attempt.keys;
        let mut how = how;
        let resp = loop {
            let read = match how {
                Read::Place => queue::place_check(keys, self.queue_key, self.my_rev),
                Read::Glance => queue::place_glance(keys, self.queue_key),
            };
            let resp = self.state().txn("queue check", read).await?;
            // A glance that finds the lock free (nobody to hand it on, or
            // the key in use as a line) reads our place in full.
            let free = queue::range_is_empty(&resp, 1);
            match how {
                Read::Glance if free => how = Read::Place,
                _ => break resp,
            }
        };
        let me = (self.attempt.value.as_slice(), self.my_rev);
        let (first_batch, lock_free) =
            match queue::read_place(keys, self.state().fairness, me, &resp) {
                queue::Place::Gone => return Ok(Position::Gone),
                queue::Place::Granted { token, passed } => {
                    return Ok(Position::Granted {
                        token,
                        behind: Behind::Passed(passed),
                    });
                }
                queue::Place::FreeToBarge => return Ok(Position::Free),
                queue::Place::Behind {
                    first_batch,
                    lock_free,
                } => (first_batch, lock_free),
            };
        if let Read::Glance = how {
            return Ok(Position::Wait);
        }
        if self.has_predecessor(first_batch).await? {
            return Ok(Position::Wait);
        }
        Ok(match lock_free {
            true => Position::Free,
            false => Position::Wait,
        })
    }

    /// Where the waiter stands now: [`Waiter::check`], retried while etcd
    /// does not answer for as long as the session lease lives here, as the
    /// waiter would wait idle; a refusal ends the wait.
    async fn read(&self, how: Read) -> EtcdResult<Position> {
        let mut retrying = Retrying::new(Budget::WhileLeased(&self.lease.lost));
        loop {
            match self.check(how).await {
                Err(e) => retrying.again(e).await?,
                position => return position,
            }
        }
    }

    /// The txn that takes the lock key if it is still free and we are
    /// still queued (see `protocol/take.rs`).
    fn take(&self) -> Repeatable {
        take::take(
            &self.attempt.keys,
            self.state().fairness,
            (&self.attempt.value, self.lease.id),
            (self.queue_key, self.my_rev),
        )
    }

    /// After a step failed: `true` if the lease was lost here and the
    /// session renewed it again (etcd kept it, see `Session::revive`), so
    /// that the waiter keeps its place in line; `false` if it was not
    /// lost, or is gone.
    async fn revive(&mut self) -> bool {
        if !self.lease.lost.is_cancelled() {
            return false;
        }
        let Some(lease) = Box::pin(self.attempt.state.session.revive(&self.lease)).await else {
            return false;
        };
        observe::lease_revived("etcd", format_args!("lease {:x}", lease.id));
        self.attempt.use_lease(&lease);
        self.lease = lease;
        true
    }

    /// The grant of the lock key, written at `token`.
    fn grant(&self, token: i64, queue_rev: Option<i64>, behind: Behind) -> Grant {
        Grant {
            token,
            queue_rev,
            behind,
            lease: Arc::clone(&self.lease),
        }
    }
}
