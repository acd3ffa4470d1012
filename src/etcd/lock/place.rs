//! A queued waiter's view of the line: where it stands (one read-only txn
//! of its queue key, the lock key and the entries ahead of it), what to
//! watch while it waits, and the txn that takes a free lock key.

use etcd_client::{Compare, CompareOp, GetOptions, GetResponse, SortOrder, SortTarget, Txn, TxnOp};

use super::attempt::LockAttempt;
use super::held::Behind;
use super::state::LockerState;
use crate::etcd::client::error::EtcdResult;
use crate::etcd::client::request::{put_leased, range_at, retry_backoff};
use crate::etcd::client::watch::{Events, Subscription, Target};
use crate::etcd::protocol::keys::{is_waiter, passed_along};
use crate::etcd::session::handout::Lease;
use crate::fairness::Fairness;

/// How many queue entries ahead one read looks at for the nearest waiter.
const AHEAD_BATCH: i64 = 8;

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

    /// The queue entries created before `below`, nearest first. Whole
    /// entries, not keys only: telling a waiter needs its lease, which
    /// etcd 3.7 leaves out of keys-only answers (see `keys::is_waiter`).
    fn ahead(&self, below: i64) -> (Vec<u8>, GetOptions) {
        let opts = GetOptions::new()
            .with_prefix()
            .with_max_create_revision((below - 1).max(1))
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(AHEAD_BATCH);
        (self.attempt.keys.queue.clone(), opts)
    }

    /// Our predecessor: the nearest fairlock waiter ahead of us in
    /// `first_batch` (read by [`Place::ahead`]), reading further while
    /// entries that are not waiters (see `keys::is_waiter`) fill a batch.
    async fn predecessor(&self, first_batch: Option<GetResponse>) -> EtcdResult<Option<Vec<u8>>> {
        let queue = &self.attempt.keys.queue;
        let mut batch = first_batch;
        loop {
            let kvs = batch.as_ref().map_or(&[][..], |g| g.kvs());
            if let Some(pred) = kvs.iter().find(|kv| is_waiter(queue, kv.key(), kv.lease())) {
                return Ok(Some(pred.key().to_vec()));
            }
            match kvs.last() {
                Some(oldest) if kvs.len() as i64 == AHEAD_BATCH => {
                    let (key, opts) = self.ahead(oldest.create_revision());
                    batch = Some(self.state().get("queue check", key, opts).await?);
                }
                _ => return Ok(None),
            }
        }
    }

    /// Re-reads our queue key, the lock key and our predecessor in one
    /// read-only txn.
    async fn check(&self) -> EtcdResult<Position> {
        let keys = &self.attempt.keys;
        let (queue, ahead) = self.ahead(self.my_rev);
        let read = Txn::new().and_then([
            TxnOp::get(self.queue_key.to_vec(), None),
            TxnOp::get(keys.lock.clone(), None),
            TxnOp::get(queue, Some(ahead)),
        ]);
        let resp = self.state().txn_hedged("queue check", read).await?;
        let since = resp.revision;
        let first = |i| range_at(&resp, i).and_then(|g| g.kvs().first().cloned());
        let Some(mine) = first(0).filter(|kv| kv.create_revision() == self.my_rev) else {
            return Ok(Position::Gone);
        };
        let lock = first(1);
        if let Some(lock) = &lock
            && lock.value() == self.attempt.value
        {
            let passed = passed_along(keys, &self.attempt.value, mine.value());
            return Ok(Position::Granted {
                token: lock.mod_revision(),
                behind: Behind::Passed(passed),
            });
        }
        if lock.is_none() && self.state().fairness == Fairness::Unfair {
            return Ok(Position::Free); // unfair: take it from any place in line
        }
        if let Some(pred) = self.predecessor(range_at(&resp, 2)).await? {
            return Ok(Position::Wait {
                target: pred,
                since,
            });
        }
        Ok(match lock {
            None => Position::Free,
            Some(_) => Position::Wait {
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

    /// The txn that creates the lock key if it is still free and we are
    /// still queued; unfair also leaves the queue in it.
    ///
    /// A fair waiter takes it only after a read (at or after its enqueue)
    /// found no waiter ahead of it, and that stays true: whatever queues
    /// later is behind it. So the txn needs no compare on the queue, and
    /// entries that are not waiters cannot block it.
    pub fn take(&self) -> Txn {
        let keys = &self.attempt.keys;
        let when = [
            Compare::create_revision(keys.lock.clone(), CompareOp::Equal, 0),
            Compare::create_revision(self.queue_key.to_vec(), CompareOp::Equal, self.my_rev),
        ];
        let mut then = vec![put_leased(&keys.lock, &self.attempt.value, self.lease.id)];
        if self.state().fairness == Fairness::Unfair {
            then.push(TxnOp::delete(self.queue_key.to_vec(), None));
        }
        Txn::new().when(when).and_then(then)
    }
}
