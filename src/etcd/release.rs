//! Unlock: hand the lock key to the first waiter, or delete it when nobody
//! waits, in one txn guarded by the holder's fencing token.
//!
//! ```text
//! if lock.mod_revision == token            (still ours: never touch a newer holder's key)
//!   if successor known:  if successor.create_revision == known
//!                          then delete my queue key;
//!                               fair successor:   put lock = successor (its lease)
//!                               unfair successor: delete lock (anyone may take it)
//!                               touch successor's queue key (its grant / wake signal)
//!                          else read the queue head again
//!   else:                if no queue key is newer than mine
//!                          then delete my queue key; delete lock
//!                          else read the queue head again
//! else delete my queue key; report the lock lost
//! ```
//!
//! A holder learns its successor without a read on the handoff path: a
//! lookup reads up to [`LOOKAHEAD`] waiters at once, and a fair grant
//! passes the ones behind its grantee along in the touch (as extra lines of
//! the grantee's queue key value), so only about one holder in
//! `LOOKAHEAD - 1` reads the queue. A passed list can only have lost
//! entries (newcomers queue behind it); the successor compare catches that.
use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use tokio_util::sync::CancellationToken;

use super::error::{EtcdError, EtcdResult};
use super::held::{HeldLock, Lookahead, lookup, successor_query, successors};
use super::keys::{LockKeys, Successor, pass_along, waiter_mode};
use super::request::{put_leased, range_at, retry_backoff, touch};
use super::state::LockerState;
use crate::fairness::Fairness;
use crate::{Error, GuardRelease, LossCause, Result, observe};

/// How often one release attempt re-reads when the queue changes under it.
const MAX_ROUNDS: usize = 16;

#[async_trait]
impl GuardRelease for HeldLock {
    async fn release(self: Box<Self>) -> Result<()> {
        self.stop_watching();
        Ok(release(*self).await?)
    }

    fn watch_for_loss(&self, lost: CancellationToken) {
        self.watch_lock(lost);
    }

    /// What the lock-key watch saw (it asks the lease when the key is
    /// deleted), else why the session lease was lost.
    fn loss_cause(&self) -> Option<LossCause> {
        self.loss.get().or_else(|| self.lease.loss.get())
    }
}

/// Releases `held`, handing the lock to the first waiter if there is one.
///
/// Durable: a failed request is retried with backoff until the release is
/// done, the lock turns out lost, or the session lease is lost (its keys then
/// expire with it). A transient etcd error must not leave the key blocked
/// for as long as the locker keeps its lease alive.
pub(crate) async fn release(mut held: HeldLock) -> EtcdResult<()> {
    let after = held.queue.as_ref().map_or(0, |q| q.1);
    let mut next = match std::mem::replace(&mut held.lookahead, Lookahead::Unknown) {
        // Others were waiting when we got the lock. If none had queued yet
        // when we looked, look again: a read is cheaper than the wasted
        // write of a release txn whose "nobody waits" compare fails.
        Lookahead::Pending(early) => match early.await.unwrap_or_default() {
            none if none.is_empty() => lookup(&held.state, &held.keys.queue, after).await,
            found => found,
        },
        Lookahead::Known(list) => list,
        Lookahead::Unknown => Vec::new(),
    };
    let mut backoff = retry_backoff();
    // Set once an attempt ended without an answer: it may still be applied.
    let mut uncertain = false;
    // Entries up to this create revision are ours or not waiters.
    let mut skip = after;
    loop {
        let outcome = release_once(&held, &mut next, &mut skip).await;
        let queue_key_deleted = outcome
            .as_ref()
            .map_or_else(EtcdError::is_lock_lost, |()| true);
        if !uncertain && queue_key_deleted {
            // Both branches of the release txn deleted our queue key, and no
            // earlier attempt can still write: its name may be reused.
            // Otherwise the slot is retired when `held` drops.
            if let Some(slot) = held.slot.take() {
                slot.free();
            }
        }
        if queue_key_deleted {
            // Nothing of this holding is left in etcd: the lock key was
            // released or is someone else's, and our queue key is gone.
            held.state.session.released(held.holding);
        }
        match outcome {
            Ok(()) => return Ok(()),
            // Our lease is alive, so the key cannot have expired: the token
            // compare failed because an earlier, unanswered attempt of this
            // very release was applied.
            Err(e) if e.is_lock_lost() && uncertain && !held.lease.lost.is_cancelled() => {
                return Ok(());
            }
            Err(e) if e.is_lock_lost() => return Err(e),
            Err(_) if held.lease.lost.is_cancelled() => {
                return Err(EtcdError::Public(Error::LockLost {
                    key: held.key.to_string(),
                    reason: "the session lease was lost before the release could reach etcd; \
                             the lock expires with it"
                        .into(),
                }));
            }
            Err(_) => {
                uncertain = true;
                held.lease.pause(&mut backoff).await;
            }
        }
    }
}

/// One release attempt: up to [`MAX_ROUNDS`] txns while the queue changes.
/// `skip`: the queue entries up to this create revision are ours or not
/// waiters; it moves past entries a re-read finds that are not waiters, so
/// that they cannot keep the "nobody waits" compare failing.
async fn release_once(
    held: &HeldLock,
    next: &mut Vec<Successor>,
    skip: &mut i64,
) -> EtcdResult<()> {
    let HeldLock {
        state,
        key,
        keys,
        token,
        queue,
        ..
    } = held;
    let delete_mine: Vec<TxnOp> = queue
        .iter()
        .map(|(q, _)| TxnOp::delete(q.clone(), None))
        .collect();
    for _ in 0..MAX_ROUNDS {
        let after = *skip;
        let reread = TxnOp::get(
            keys.queue.clone(),
            Some(successor_query().with_min_create_revision(after + 1)),
        );
        let mut then = delete_mine.clone();
        // Whom the step hands the lock to: a fair waiter or an unfair one.
        let handoff = next.first().map(|s| waiter_mode(&s.key));
        let step = match next.split_first() {
            Some((s, rest)) => {
                match waiter_mode(&s.key) {
                    Fairness::Unfair => {
                        then.push(TxnOp::delete(keys.lock.clone(), None));
                        then.push(touch(&s.key));
                    }
                    Fairness::Fair => {
                        then.push(put_leased(&keys.lock, &s.value, s.lease));
                        then.push(grant_touch(keys, s, rest));
                    }
                }
                Txn::new().when([Compare::create_revision(
                    s.key.clone(),
                    CompareOp::Equal,
                    s.create_revision,
                )])
            }
            None => {
                then.push(TxnOp::delete(keys.lock.clone(), None));
                Txn::new().when([Compare::create_revision(
                    keys.queue.clone(),
                    CompareOp::Less,
                    after + 1,
                )
                .with_prefix()])
            }
        };
        let step = step.and_then(then).or_else([reread]);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                keys.lock.clone(),
                CompareOp::Equal,
                *token,
            )])
            .and_then([TxnOp::txn(step)])
            .or_else(delete_mine.clone());
        // Others wait for this txn: one stuck on a leader that stopped
        // answering is retried after a third of the TTL rather than after
        // the full request timeout (the token compare makes retries safe).
        let attempt_timeout = state.config.request_timeout().min(state.config.ttl() / 3);
        let resp = state
            .write("unlock", &keys.lock, txn, attempt_timeout)
            .await?;
        if !resp.succeeded() {
            return Err(EtcdError::Public(Error::LockLost {
                key: key.to_string(),
                reason: "the lock key was deleted or taken over before unlock \
                         (did the session lease expire?)"
                    .into(),
            }));
        }
        let Some(TxnOpResponse::Txn(step)) = resp.op_responses().into_iter().next() else {
            return Err(EtcdError::Failed {
                op: "unlock",
                why: "etcd answered the release txn in an unexpected shape".into(),
            });
        };
        if step.succeeded() {
            if let Some(mode) = handoff {
                observe::handed_off(mode);
            }
            return Ok(());
        }
        let (waiters, last) = range_at(&step, 0)
            .map(|g| successors(&keys.queue, &g))
            .unwrap_or_default();
        if waiters.is_empty()
            && let Some(last) = last
        {
            *skip = last; // only entries that are not waiters
        }
        *next = waiters;
    }
    Err(EtcdError::Failed {
        op: "unlock",
        why: format!("the queue changed during {MAX_ROUNDS} release attempts in a row").into(),
    })
}

/// Serves the first waiter of a lock key that is free, as a release would
/// (fair: hands it the key; unfair: wakes it). Called when a waiter gives
/// up: it may have been the one that a lock freed without a handoff was
/// waiting for (a woken unfair waiter; or the first in line when the
/// holder's lease ended), and those behind it would otherwise notice only
/// once patient (see `queue.rs`). One read; a write only if the key is free
/// and someone waits. Best effort: errors are ignored for that reason.
pub(crate) async fn serve_if_free(state: &LockerState, keys: &LockKeys) {
    let read = Txn::new().and_then([
        TxnOp::get(keys.lock.clone(), Some(GetOptions::new().with_count_only())),
        TxnOp::get(keys.queue.clone(), Some(successor_query())),
    ]);
    let Ok(resp) = state.txn("serve a free lock", read).await else {
        return;
    };
    if range_at(&resp, 0).is_none_or(|g| g.count() > 0) {
        return;
    }
    let Some(first) =
        range_at(&resp, 1).and_then(|g| successors(&keys.queue, &g).0.into_iter().next())
    else {
        return;
    };
    let mut then = vec![touch(&first.key)];
    if waiter_mode(&first.key).is_fair() {
        then.push(put_leased(&keys.lock, &first.value, first.lease));
    }
    let serve = Txn::new()
        .when([
            Compare::create_revision(keys.lock.clone(), CompareOp::Equal, 0),
            Compare::create_revision(first.key.clone(), CompareOp::Equal, first.create_revision),
        ])
        .and_then(then);
    let _ = state.txn("serve a free lock", serve).await;
}

/// The touch that grants the lock to fair successor `s`: its value gains
/// the waiters behind it (`rest`, see [`pass_along`]) so that it needs no
/// lookup.
fn grant_touch(keys: &LockKeys, s: &Successor, rest: &[Successor]) -> TxnOp {
    match pass_along(keys, s, rest) {
        Some(value) => TxnOp::put(
            s.key.clone(),
            value,
            Some(PutOptions::new().with_ignore_lease()),
        ),
        None => touch(&s.key),
    }
}
