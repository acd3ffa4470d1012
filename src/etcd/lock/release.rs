//! Unlock: the release rounds (their txn is specified in `protocol/mod.rs`
//! and built in `protocol/release.rs`), retried until done.
//!
//! A release hands the lock key to the first waiter, or deletes it when
//! nobody waits, in one txn guarded by the holder's fencing token. When
//! its compares fail, its else branch tells a lost lock (the lock key gone
//! or rewritten) from a queue that changed (the next round serves the head
//! it read). It deletes our queue key on both branches: while we still
//! hold, that is harmless (every take compares the lock key absent, and
//! `after` keeps the "nobody waits" compare from counting the entries up
//! to ours; a patient waiter watching our entry reads the queue again and
//! watches the lock key instead), and a lost holding must not leave it
//! behind. The txn is one level, not a txn inside a txn: etcd 3.4 checks
//! every op list of a txn for overlapping writes (building a small tree
//! for each, nested lists included) before it proposes it: 21 us of
//! etcd's CPU per lock+unlock cycle with the nested form, 8 us with this
//! one (etcd's `--enable-pprof`, see `docs/performance.md`).
//!
//! A holder learns its successor without a read on the handoff path: a
//! lookup reads up to [`LOOKAHEAD`] waiters at once, and a fair grant
//! passes the ones behind its grantee along in the touch (as extra lines of
//! the grantee's queue key value), so only about one holder in
//! `LOOKAHEAD - 1` reads the queue. A passed list can only have lost
//! entries (newcomers queue behind it); the successor compare catches that.
use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::Txn;
use futures_util::future::join_all;
use tokio_util::sync::CancellationToken;

use super::held_lock::{HeldLock, Lookahead, lookup};
use crate::api::guard::release_each;
use crate::api::multi_guard::all_of_kind;
use crate::etcd::client::error::{EtcdError, EtcdResult};
use crate::etcd::client::request::Answer;
use crate::etcd::client::request::retry_backoff;
use crate::etcd::protocol::keys::{LockKeys, Successor};
#[cfg(doc)]
use crate::etcd::protocol::queue::LOOKAHEAD;
use crate::etcd::protocol::release::{self, Released, Round, read_release, release_round};
use crate::etcd::session::state::{LockerState, Path};
use crate::util::observe;
use crate::{Error, GuardRelease, Key, LossCause, Result};

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

    /// The keys of one `lock_all` on this locker: released in one txn
    /// ([`release_all`]). Locks of anything else: each on its own.
    async fn release_with(self: Box<Self>, others: Vec<Box<dyn GuardRelease>>) -> Vec<Result<()>> {
        match all_of_kind(self, others, |a, b| Arc::ptr_eq(&a.state, &b.state)) {
            Ok(helds) => release_all(helds)
                .await
                .into_iter()
                .map(|r| Ok(r?))
                .collect(),
            Err(each) => release_each(each).await,
        }
    }
}

/// Releases `held`, handing the lock to the first waiter if there is one.
///
/// Durable: a failed request is retried with backoff until the release is
/// done, the lock turns out lost, or the session lease is lost (its keys then
/// expire with it). A transient etcd error must not leave the key blocked
/// for as long as the locker keeps its lease alive.
pub(crate) async fn release(mut held: HeldLock) -> EtcdResult<()> {
    let view = QueueView {
        next: first_in_line(&mut held).await,
        skip: after(&held),
    };
    release_from(held, view, false).await
}

/// The waiters first in line behind `held`, as far as it can know them.
async fn first_in_line(held: &mut HeldLock) -> Vec<Successor> {
    match std::mem::replace(&mut held.lookahead, Lookahead::Unknown) {
        // Others were waiting when we got the lock. If none had queued yet
        // when we looked, look again: a read is cheaper than the wasted
        // write of a release txn whose "nobody waits" compare fails.
        Lookahead::Pending(early) => match early.await.unwrap_or_default() {
            none if none.is_empty() => lookup(&held.state, &held.keys.queue, after(held)).await,
            found => found,
        },
        Lookahead::Known(list) => list,
        Lookahead::Unknown => Vec::new(),
    }
}

/// The create revision up to which the queue entries are ours or not
/// waiters: our own entry's, if we have one.
fn after(held: &HeldLock) -> i64 {
    held.queue.as_ref().map_or(0, |q| q.1)
}

/// [`release`], knowing `view` of the queue, and `uncertain`
/// set if an earlier request of this release got no answer (it may still
/// be applied).
async fn release_from(
    mut held: HeldLock,
    mut view: QueueView,
    mut uncertain: bool,
) -> EtcdResult<()> {
    let mut backoff = retry_backoff();
    // Set once etcd, out of space, refused the handoff (its put): the lock
    // is then freed without one (see `free_once`).
    let mut no_space = false;
    loop {
        let outcome = if no_space {
            free_once(&held).await
        } else {
            release_once(&held, &mut view).await
        };
        let queue_key_deleted = outcome
            .as_ref()
            .map_or_else(EtcdError::is_lock_lost, |()| true);
        if queue_key_deleted {
            released(&mut held, !uncertain);
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

/// Records that nothing of `held` is left in etcd: the lock key was
/// released or is someone else's, and our queue key is gone. `settled`:
/// no earlier request of the release can still write, so the queue key's
/// name may be reused (otherwise the slot is retired when `held` drops).
fn released(held: &mut HeldLock, settled: bool) {
    if settled && let Some(slot) = held.slot.take() {
        slot.free();
    }
    held.state.session.released(held.holding);
}

/// Releases the keys of one `lock_all` of one locker: one txn with every
/// key's release round (`protocol/release.rs`), so they are handed on
/// or freed at one revision; a round whose queues changed is followed by
/// one serving the waiters its else branch read, as [`release`] does for
/// one key. When a key turns out lost, or a txn gets no answer, each key
/// is released on its own as [`release`] does, with what it knows.
pub(crate) async fn release_all(mut helds: Vec<HeldLock>) -> Vec<EtcdResult<()>> {
    let mut views = Vec::with_capacity(helds.len());
    for held in &mut helds {
        held.stop_watching();
        views.push(QueueView {
            next: first_in_line(held).await,
            skip: after(held),
        });
    }
    let uncertain = match together(&mut helds, &mut views).await {
        Ok(true) => return helds.iter().map(|_| Ok(())).collect(),
        Ok(false) => false,
        // Refused before it was applied: nothing is uncertain.
        Err(e) if e.is_no_space() => false,
        Err(_) => true,
    };
    let each = helds
        .into_iter()
        .zip(views)
        .map(|(held, view)| release_from(held, view, uncertain));
    join_all(each).await
}

/// What a release knows of the queue behind its holder: the waiters
/// first in line, and the create revision up to which the entries are
/// ours or not waiters.
struct QueueView {
    next: Vec<Successor>,
    skip: i64,
}

/// The rounds of [`release_all`]: up to [`MAX_ROUNDS`] txns releasing
/// every key of `helds` while their queues change. `true` once released;
/// `false` if a key turned out lost or the queues kept changing (each key
/// is then released on its own, and a lost one reported).
async fn together(helds: &mut [HeldLock], views: &mut [QueueView]) -> EtcdResult<bool> {
    let Some(first) = helds.first() else {
        return Ok(true);
    };
    for _ in 0..MAX_ROUNDS {
        let rounds: Vec<Round> = helds
            .iter()
            .zip(views.iter())
            .map(|(held, view)| release_round(held.holder(), &view.next, view.skip))
            .collect();
        let (txn, starts) = release::release_together(&rounds);
        // Alone: a batch holds at most one write per lock, and this one
        // writes the keys of several (see `client/batch.rs`).
        let resp = first.state.send("unlock", Path::Alone, txn).await?;
        if resp.succeeded() {
            for (held, round) in helds.iter_mut().zip(&rounds) {
                released(held, true);
                if let Some(mode) = round.handoff {
                    observe::handed_off(mode);
                }
            }
            return Ok(true);
        }
        for ((held, view), at) in helds.iter().zip(views.iter_mut()).zip(starts) {
            match read_release(held.holder(), &resp, at) {
                Released::Changed { waiters, last } => {
                    held.state.heads.forget(&held.keys.queue);
                    view.saw(waiters, last);
                }
                Released::Lost => return Ok(false),
                Released::Done => {}
            }
        }
    }
    Ok(false)
}

impl QueueView {
    /// A release round's else branch read `waiters` first in line, and
    /// entries up to `last` (waiters or not).
    fn saw(&mut self, waiters: Vec<Successor>, last: Option<i64>) {
        if waiters.is_empty()
            && let Some(last) = last
        {
            self.skip = last; // only entries that are not waiters
        }
        self.next = waiters;
    }
}

/// One release attempt: up to [`MAX_ROUNDS`] txns while the queue changes.
/// `view.skip` moves past entries a re-read finds that are not waiters, so
/// that they cannot keep the "nobody waits" compare failing.
async fn release_once(held: &HeldLock, view: &mut QueueView) -> EtcdResult<()> {
    let holding = held.holder();
    for _ in 0..MAX_ROUNDS {
        let round = release_round(holding, &view.next, view.skip);
        let resp = send(held, round.txn()).await?;
        match read_release(holding, &resp, 0) {
            Released::Done => {
                if let Some(mode) = round.handoff {
                    observe::handed_off(mode);
                }
                return Ok(());
            }
            Released::Lost => return Err(taken_over(&held.key)),
            Released::Changed { waiters, last } => {
                // A waiter we knew of is gone: what the locker kept of
                // this queue may hold it too.
                held.state.heads.forget(&held.keys.queue);
                view.saw(waiters, last);
            }
        }
    }
    Err(EtcdError::Failed {
        op: "unlock",
        why: format!("the queue changed during {MAX_ROUNDS} release attempts in a row").into(),
    })
}

/// Frees the lock without handing it on (see `protocol/release.rs`): for
/// an etcd out of space, which refuses every put (a handoff puts the lock
/// key, a touch puts the waiter's key) but still deletes. The waiters
/// notice the free lock once patient (see `queue.rs`); their own take then
/// meets etcd's refusal and fails with it.
async fn free_once(held: &HeldLock) -> EtcdResult<()> {
    if send(held, release::free(held.holder())).await?.succeeded() {
        return Ok(());
    }
    Err(taken_over(&held.key))
}

/// Sends release txn `txn` of `held`. Others wait for it: one stuck on a
/// leader that stopped answering is retried after a third of the TTL
/// rather than after the full request timeout (the token compare makes
/// retries safe).
async fn send(held: &HeldLock, txn: Txn) -> EtcdResult<Answer> {
    let config = &held.state.config;
    let timeout = config.request_timeout().min(config.ttl() / 3);
    let path = Path::Batched {
        lock: &held.keys.lock,
        within: timeout,
    };
    held.state.send("unlock", path, txn).await
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
    let Ok(read) = state
        .txn("serve a free lock", release::serve_read(keys))
        .await
    else {
        return;
    };
    if let Some(serve) = release::serve(keys, &read) {
        let _ = state.txn("serve a free lock", serve).await;
    }
}
