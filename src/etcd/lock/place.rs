//! A queued waiter's view of the line: where it stands (one read-only txn
//! of its queue key, the lock key and the entries ahead of it, and more
//! reads while entries that are not waiters fill a batch), what to watch
//! while it waits, and the txn that takes a free lock key.

use etcd_client::{GetResponse, Txn};

use super::attempt::LockAttempt;
use super::held::Behind;
use crate::etcd::client::error::EtcdResult;
use crate::etcd::client::request::retry_backoff;
use crate::etcd::client::watch::{Events, Subscription, Target};
use crate::etcd::protocol::queue::{self, Ahead};
use crate::etcd::protocol::take;
use crate::etcd::session::handout::Lease;
use crate::etcd::session::state::LockerState;

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

/// A queued waiter's place in line, borrowing its attempt.
pub(crate) struct Place<'a> {
    pub attempt: &'a LockAttempt,
    pub lease: &'a Lease,
    /// The attempt's queue key, created at `my_rev`.
    pub queue_key: &'a [u8],
    pub my_rev: i64,
}

impl Place<'_> {
    fn state(&self) -> &LockerState {
        &self.attempt.state
    }

    /// Watches `key` (our predecessor's queue key, or the lock key) for its
    /// deletion after revision `since`. Replays from there, so no deletion can slip by;
    /// such a watch may start unsynced (~100 ms late), which only matters
    /// when a lock was freed without a handoff.
    pub async fn watch(&self, key: &[u8], since: i64) -> EtcdResult<Subscription> {
        let key = key.to_vec();
        self.state()
            .hub
            .subscribe(Target {
                key,
                range_end: None,
                start_revision: Some(since + 1),
                events: Events::All,
            })
            .await
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
        let resp = self.state().txn_hedged("queue check", read).await?;
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

    /// [`Place::check`], retried with backoff while etcd does not answer
    /// (e.g. thousands of waiters re-reading at once): a waiter gives up
    /// only when its session lease is lost, as it would while idle.
    pub async fn check_until_answered(&self) -> EtcdResult<Position> {
        let mut backoff = retry_backoff();
        loop {
            match self.check().await {
                Err(e) if self.lease.lost.is_cancelled() => return Err(e),
                Err(_) => self.lease.pause(&mut backoff).await,
                position => return position,
            }
        }
    }

    /// The txn that takes the lock key if it is still free and we are
    /// still queued (see `protocol/take.rs`).
    pub fn take(&self) -> Txn {
        take::take(
            &self.attempt.keys,
            self.state().fairness,
            (&self.attempt.value, self.lease.id),
            (self.queue_key, self.my_rev),
        )
    }
}
