//! Unlock: hand the lock key to the first waiter, or delete it when nobody
//! waits, in one txn guarded by the holder's fencing token.
//!
//! ```text
//! if lock.mod_revision == token          (still ours: never touch a newer holder's key)
//!    and successor known:  successor.create_revision == known
//!        nobody known:     no queue key is newer than mine
//! then delete my queue key;
//!      fair successor:   put lock = successor (its lease), touch its queue key
//!      unfair successor: delete lock (anyone may take it), touch its queue key
//!      nobody:           delete lock
//! else read the lock key and the queue head; delete my queue key
//! ```
//!
//! The else branch tells the two failures apart: a lock key that is gone or
//! has another revision is lost; one that is still ours means the queue
//! changed, and the next round uses the head just read. Deleting our queue
//! key there, while we still hold, is harmless: every take compares the
//! lock key absent, and `after` keeps the compare above from counting the
//! entries up to ours; a patient waiter right behind us that watches our
//! key reads the queue again and watches the lock key instead. And a lost
//! holding must not leave the key behind. One level, not a txn inside a
//! txn: etcd 3.4 checks every op list of a txn for overlapping writes
//! (building a small tree for each, nested lists included) before it
//! proposes it: 21 us of etcd's CPU per lock+unlock cycle with the nested
//! form, 8 us with this one (etcd's `--enable-pprof`, see
//! `docs/performance.md`).
//!
//! A holder learns its successor without a read on the handoff path: a
//! lookup reads up to [`LOOKAHEAD`] waiters at once, and a fair grant
//! passes the ones behind its grantee along in the touch (as extra lines of
//! the grantee's queue key value), so only about one holder in
//! `LOOKAHEAD - 1` reads the queue. A passed list can only have lost
//! entries (newcomers queue behind it); the successor compare catches that.
use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use tokio_util::sync::CancellationToken;

use super::held::{HeldLock, Lookahead, lookup, successor_query, successors};
use super::state::LockerState;
use crate::etcd::client::batch::Answer;
use crate::etcd::client::error::{EtcdError, EtcdResult};
use crate::etcd::client::request::{put_leased, range_at, retry_backoff, touch};
use crate::etcd::protocol::keys::{LockKeys, Successor, pass_along, waiter_mode};
use crate::fairness::Fairness;
use crate::{Error, GuardRelease, Key, LossCause, Result, observe};

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
    // Set once etcd, out of space, refused the handoff (its put): the lock
    // is then freed without one (see `free_once`).
    let mut no_space = false;
    loop {
        let outcome = if no_space {
            free_once(&held).await
        } else {
            release_once(&held, &mut next, &mut skip).await
        };
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
            // Refused before it was applied: nothing is uncertain.
            Err(e) if e.is_no_space() && !no_space => no_space = true,
            Err(e) if e.is_no_space() => return Err(e),
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
        key,
        keys,
        token,
        queue,
        ..
    } = held;
    let delete_mine = delete_queue_key(queue);
    for _ in 0..MAX_ROUNDS {
        let after = *skip;
        let mut when = vec![still_ours(held)];
        let mut then = delete_mine.clone();
        // Whom the txn hands the lock to: a fair waiter or an unfair one.
        let handoff = next.first().map(|s| waiter_mode(&s.key));
        match next.split_first() {
            Some((s, rest)) => {
                when.push(Compare::create_revision(
                    s.key.clone(),
                    CompareOp::Equal,
                    s.create_revision,
                ));
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
            }
            None => {
                when.push(
                    Compare::create_revision(keys.queue.clone(), CompareOp::Less, after + 1)
                        .with_prefix(),
                );
                then.push(TxnOp::delete(keys.lock.clone(), None));
            }
        }
        // Failed: whether the lock key is still ours, and the queue head.
        // Our queue key goes either way (see the module doc).
        let mut otherwise = vec![
            TxnOp::get(keys.lock.clone(), Some(GetOptions::new().with_keys_only())),
            TxnOp::get(
                keys.queue.clone(),
                Some(successor_query().with_min_create_revision(after + 1)),
            ),
        ];
        otherwise.extend(delete_mine.iter().cloned());
        let txn = Txn::new().when(when).and_then(then).or_else(otherwise);
        let resp = send(held, txn).await?;
        if resp.succeeded() {
            if let Some(mode) = handoff {
                observe::handed_off(mode);
            }
            return Ok(());
        }
        let ours = range_at(&resp, 0).is_some_and(|g| {
            g.kvs()
                .first()
                .is_some_and(|kv| kv.mod_revision() == *token)
        });
        if !ours {
            return Err(taken_over(key));
        }
        let (waiters, last) = range_at(&resp, 1)
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

/// Frees the lock without handing it on: delete the lock key and our queue
/// key, guarded by the token. For an etcd out of space, which refuses every
/// put (a handoff puts the lock key, a touch puts the waiter's key) but
/// still deletes. The waiters notice the free lock once patient (see
/// `queue.rs`); their own take then meets etcd's refusal and fails with it.
async fn free_once(held: &HeldLock) -> EtcdResult<()> {
    let mut then = delete_queue_key(&held.queue);
    let otherwise = then.clone();
    then.push(TxnOp::delete(held.keys.lock.clone(), None));
    let txn = Txn::new()
        .when([still_ours(held)])
        .and_then(then)
        .or_else(otherwise);
    if send(held, txn).await?.succeeded() {
        return Ok(());
    }
    Err(taken_over(&held.key))
}

/// The compare of every release txn: the lock key is still the one `held`
/// got (never touch a newer holder's key).
fn still_ours(held: &HeldLock) -> Compare {
    Compare::mod_revision(held.keys.lock.clone(), CompareOp::Equal, held.token)
}

/// Sends release txn `txn` of `held`. Others wait for it: one stuck on a
/// leader that stopped answering is retried after a third of the TTL
/// rather than after the full request timeout (the token compare makes
/// retries safe).
async fn send(held: &HeldLock, txn: Txn) -> EtcdResult<Answer> {
    let config = &held.state.config;
    let timeout = config.request_timeout().min(config.ttl() / 3);
    held.state
        .write("unlock", &held.keys.lock, txn, timeout)
        .await
}

/// The delete of the holder's own queue key, if it has one (a fair
/// grantee keeps it while it holds).
fn delete_queue_key(queue: &Option<(Vec<u8>, i64)>) -> Vec<TxnOp> {
    queue
        .iter()
        .map(|(q, _)| TxnOp::delete(q.clone(), None))
        .collect()
}

/// The lock key was not ours any more when the release reached etcd.
fn taken_over(key: &Key) -> EtcdError {
    EtcdError::Public(Error::LockLost {
        key: key.to_string(),
        reason: "the lock key was deleted or taken over before unlock \
                 (did the session lease expire?)"
            .into(),
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
