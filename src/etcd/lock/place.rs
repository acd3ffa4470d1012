//! A queued waiter ([`Waiter`], driven by `queue.rs`) and its view of the
//! line: where it stands (one read-only txn of its queue key, the lock key
//! and the entries ahead of it, and more reads while entries that are not
//! waiters fill a batch), what to watch while it waits, the txn that takes
//! a free lock key, and keeping its place when its lease lapsed here.

use std::sync::Arc;

use etcd_client::GetResponse;

use super::attempt::LockAttempt;
use super::held_lock::{Behind, Grant};
use crate::etcd::client::error::EtcdResult;
use crate::etcd::client::retry::{Budget, Retrying};
use crate::etcd::protocol::ops::Repeatable;
use crate::etcd::protocol::queue::{self, Ahead};
use crate::etcd::protocol::take;
use crate::etcd::session::handout::Lease;
use crate::etcd::session::state::LockerState;
use crate::util::observe;

/// Where a re-read of the queue found the waiter.
pub(crate) enum Position {
    /// The lock key holds our value: a holder handed it to us, with the
    /// waiters behind us that it passed along.
    Granted { token: i64, behind: Behind },
    /// Our queue key is gone: the session lease expired or it was deleted.
    Gone,
    /// Wait for `target` to be deleted after revision `since`.
    Wait { target: Vec<u8>, since: i64 },
    /// The lock key is free and we may take it (fair: we are first in line).
    Free,
}

/// Which re-read of the queue.
pub(crate) enum Read {
    /// Something changed, or our view may be stale.
    Again,
    /// Patience ran out before anything made us read: waiters queued
    /// together get patient together, so such reads take one of the
    /// locker's few re-read permits (etcd load, and memory for requests in
    /// flight).
    Patient,
}

/// A queued waiter: its attempt, its queue key (created at `my_rev`) and
/// the lease that key is bound to.
pub(crate) struct Waiter<'a> {
    pub attempt: &'a mut LockAttempt,
    pub queue_key: &'a [u8],
    pub my_rev: i64,
    pub lease: Arc<Lease>,
}

impl Waiter<'_> {
    fn state(&self) -> &LockerState {
        &self.attempt.state
    }

    /// Our predecessor: the nearest fairlock waiter ahead of us, from
    /// `first_batch` on, reading further while entries that are not
    /// waiters fill a batch.
    async fn predecessor(&self, first_batch: Option<GetResponse>) -> EtcdResult<Option<Vec<u8>>> {
        let queue = &self.attempt.keys.queue;
        let mut batch = first_batch;
        loop {
            let kvs = batch.as_ref().map_or(&[][..], |g| g.kvs());
            match queue::nearest_waiter(queue, kvs) {
                Ahead::Waiter(pred) => return Ok(Some(pred)),
                Ahead::ReadBelow(rev) => {
                    let next = self
                        .state()
                        .get("queue check", queue.clone(), queue::ahead(rev))
                        .await?;
                    batch = Some(next);
                }
                Ahead::Nobody => return Ok(None),
            }
        }
    }

    /// Re-reads our queue key, the lock key and our predecessor in one
    /// read-only txn (see `protocol/queue.rs`).
    async fn check(&self) -> EtcdResult<Position> {
        let keys = &self.attempt.keys;
        let read = queue::place_check(keys, self.queue_key, self.my_rev);
        let resp = self.state().txn("queue check", read).await?;
        let me = (self.attempt.value.as_slice(), self.my_rev);
        let (first_batch, lock_free, since) =
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
                    since,
                } => (first_batch, lock_free, since),
            };
        if let Some(pred) = self.predecessor(first_batch).await? {
            return Ok(Position::Wait {
                target: pred,
                since,
            });
        }
        Ok(match lock_free {
            true => Position::Free,
            false => Position::Wait {
                target: keys.lock.clone(),
                since,
            },
        })
    }

    /// Where the waiter stands now: [`Waiter::check`], retried while etcd
    /// does not answer (e.g. thousands of waiters re-reading at once) for
    /// as long as the session lease lives here, as the waiter would wait
    /// idle; a refusal ends the wait.
    pub async fn read(&self, read: Read) -> EtcdResult<Position> {
        let _permit = match read {
            Read::Patient => Some(self.state().watches.rereads.acquire().await),
            Read::Again => None,
        };
        let mut retrying = Retrying::new(Budget::WhileLeased(&self.lease.lost));
        loop {
            match self.check().await {
                Err(e) => retrying.again(e).await?,
                position => return position,
            }
        }
    }

    /// The txn that takes the lock key if it is still free and we are
    /// still queued (see `protocol/take.rs`).
    pub fn take(&self) -> Repeatable {
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
    pub async fn revive(&mut self) -> bool {
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
    pub fn grant(&self, token: i64, queue_rev: Option<i64>, behind: Behind) -> Grant {
        Grant {
            token,
            queue_rev,
            behind,
            lease: Arc::clone(&self.lease),
        }
    }
}
