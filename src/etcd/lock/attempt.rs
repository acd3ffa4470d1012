//! One call to `lock` or `try_lock`: its owner value and queue key, the
//! writes it sends, and the cleanup that giving up (error, cancel or drop)
//! starts, so that an attempt leaves nothing behind.

use std::sync::Arc;

use etcd_client::Txn;

use tokio::sync::watch;

use super::cleanup::{self, Landing, Written};
use super::held_lock::{Grant, HeldLock};
use crate::etcd::client::error::{EtcdError, EtcdResult};
use crate::etcd::client::in_doubt::InDoubt;
use crate::etcd::client::request::Answer;
use crate::etcd::protocol::keys::{LockKeys, owner_value};
use crate::etcd::session::handout::Lease;
use crate::etcd::session::slots::Slot;
use crate::etcd::session::state::{LockerState, Outgoing, Path};
use crate::semantics::armed::{Armed, TakeBack};
use crate::{Key, LockGuard};

/// One attempt to take a lock.
pub(crate) struct LockAttempt {
    pub state: Arc<LockerState>,
    pub key: Key,
    pub keys: LockKeys,
    /// The owner value it writes to the lock key and its queue key.
    pub value: Vec<u8>,
    /// Its queue key (`lock` only).
    queue_key: Option<Vec<u8>>,
    /// The slot naming `queue_key`.
    slot: Option<Slot>,
    /// The lease its writes used; none means nothing was written.
    lease: Option<Arc<Lease>>,
    /// Its write on its way, and whether one may land unseen: if the
    /// caller gives up meanwhile, the cleanup finishes it first.
    in_doubt: InDoubt,
    /// The outcome of a write another attempt of the same `lock_all` call
    /// sent for this one too (see [`LockAttempt::write_together`]):
    /// `Some(answered)` once it ended.
    landing: Option<watch::Receiver<Option<bool>>>,
    /// Its lease lapsed here once and was renewed again (see
    /// [`LockAttempt::use_lease`]).
    revived: bool,
}

impl LockAttempt {
    /// An attempt of `try_lock`: it never queues.
    pub fn direct(state: &Arc<LockerState>, key: &Key) -> Armed<Self> {
        LockAttempt::new(state, key, state.keys(key), None)
    }

    /// An attempt of `lock`, and the queue key it waits under (in a slot
    /// of this locker's, see `session/slots.rs`).
    pub fn queued(state: &Arc<LockerState>, key: &Key) -> (Armed<Self>, Vec<u8>) {
        let keys = state.keys(key);
        let slot = state.slots.take(&keys.lock);
        let queue_key = keys.waiter(&state.id, state.fairness, slot.number());
        let attempt = LockAttempt::new(state, key, keys, Some((queue_key.clone(), slot)));
        (attempt, queue_key)
    }

    fn new(
        state: &Arc<LockerState>,
        key: &Key,
        keys: LockKeys,
        queue: Option<(Vec<u8>, Slot)>,
    ) -> Armed<Self> {
        let (queue_key, slot) = queue.unzip();
        Armed::new(LockAttempt {
            queue_key,
            slot,
            value: owner_value(state.fairness),
            state: Arc::clone(state),
            key: key.clone(),
            keys,
            lease: None,
            in_doubt: InDoubt::default(),
            landing: None,
            revived: false,
        })
    }

    /// `true` if the lease its writes used is presumed lost here (not
    /// renewed for a TTL), as opposed to gone in etcd (revoked, or expired
    /// and reported).
    pub fn lease_presumed_lost(&self) -> bool {
        // Once lapsed here, whatever etcd did next (its entry may still
        // vanish with the lease), the waiter held nothing: it queues again.
        self.revived
            || self
                .lease
                .as_ref()
                .is_some_and(|l| l.lost.is_cancelled() && !l.gone_in_etcd())
    }

    /// From now on its writes are bound to `lease` (the same lease, revived
    /// after it lapsed here: see `Session::revive`).
    pub fn use_lease(&mut self, lease: &Arc<Lease>) {
        if self.lease.as_ref().is_some_and(|l| l.id == lease.id) {
            self.lease = Some(Arc::clone(lease));
            self.revived = true;
        }
    }

    /// Sends a txn that may write this attempt's keys with `lease`,
    /// batched with other lockers' writes (a [`Repeatable`] one hedged:
    /// see `LockerState::send`). If the attempt is abandoned before the
    /// answer came, the write is finished by the cleanup, which waits for
    /// it first: it cannot land after the cleanup.
    ///
    /// [`Repeatable`]: crate::etcd::protocol::ops::Repeatable
    pub async fn write(
        &mut self,
        op: &'static str,
        lease: &Arc<Lease>,
        txn: impl Into<Outgoing>,
    ) -> EtcdResult<Answer> {
        self.send(op, lease, (txn.into(), true), None).await
    }

    /// [`LockAttempt::write`], `batched` or alone, telling `landed` (if
    /// any) whether it was answered once it ends.
    async fn send(
        &mut self,
        op: &'static str,
        lease: &Arc<Lease>,
        (txn, batched): (Outgoing, bool),
        landed: Option<watch::Sender<Option<bool>>>,
    ) -> EtcdResult<Answer> {
        self.lease = Some(Arc::clone(lease));
        let state = Arc::clone(&self.state);
        let lock = self.keys.lock.clone();
        // If this future is dropped, the write stays for the cleanup to
        // finish (see `take_back`).
        let result = self
            .in_doubt
            .send(async move {
                let path = match batched {
                    true => Path::Batched {
                        lock: &lock,
                        within: state.config.request_timeout(),
                    },
                    false => Path::Alone,
                };
                let answer = state.send(op, path, txn).await;
                if let Some(landed) = landed {
                    let _ = landed.send(Some(answer.is_ok()));
                }
                answer
            })
            .await;
        match result {
            Err(e) => Err(self.state.lease_error(&self.key, lease, e).await),
            ok => ok,
        }
    }

    /// Sends `build(lease id)`, one txn that writes the keys of every
    /// attempt of one `lock_all` call, alone (it names several locks), on
    /// the session lease, replaced once if etcd no longer knows it. Sent
    /// by the first attempt; every attempt's cleanup waits for it.
    pub async fn write_together(
        all: &mut [Armed<LockAttempt>],
        op: &'static str,
        build: impl Fn(i64) -> Txn,
    ) -> EtcdResult<(Answer, Arc<Lease>)> {
        let Some((first, others)) = all.split_first_mut() else {
            return Err(EtcdError::Failed {
                op,
                why: "no key to write".into(),
            });
        };
        let mut retried = false;
        loop {
            let lease = Box::pin(first.state.session.lease()).await?;
            let (landed, landing) = watch::channel(None);
            for other in others.iter_mut() {
                other.lease = Some(Arc::clone(&lease));
                other.landing = Some(landing.clone());
            }
            let txn = (Outgoing::from(build(lease.id)), false);
            let result = Box::pin(first.send(op, &lease, txn, Some(landed))).await;
            for other in others.iter_mut() {
                other.landing = None;
                other.in_doubt.unanswered |= result.as_ref().is_err_and(EtcdError::is_transient);
            }
            match result {
                Err(e) if e.is_session_lost() && !retried => retried = true,
                result => return Ok((result?, lease)),
            }
        }
    }

    /// Writes `build(lease id)` with the session lease. A lease etcd no
    /// longer knows is replaced once, transparently.
    pub async fn write_with_lease(
        &mut self,
        op: &'static str,
        build: impl Fn(i64) -> Txn,
    ) -> EtcdResult<(Answer, Arc<Lease>)> {
        let mut retried = false;
        loop {
            let lease = Box::pin(self.state.session.lease()).await?;
            match Box::pin(self.write(op, &lease, build(lease.id))).await {
                Err(e) if e.is_session_lost() && !retried => retried = true,
                result => return Ok((result?, lease)),
            }
        }
    }
}

impl Armed<LockAttempt> {
    /// The guard for `grant`; the attempt is done.
    pub fn granted(mut self, grant: Grant) -> LockGuard {
        self.set_armed(false);
        let lost = grant.lease.lost.child_token();
        let expiry = grant.lease.expiry.clone();
        // A holder without a queue revision has no queue key: it never
        // wrote one, or deleted it in the txn that took the lock.
        let slot = match (self.slot.take(), grant.queue_rev) {
            (Some(slot), None) if !self.in_doubt.unanswered => {
                slot.free();
                None
            }
            (slot, _) => slot,
        };
        let token = u64::try_from(grant.token).unwrap_or_default();
        let key = self.key.clone();
        let held = HeldLock::new(
            Arc::clone(&self.state),
            self.key.clone(),
            self.keys.clone(),
            self.queue_key.take(),
            grant,
            slot,
        );
        LockGuard::new(key, token, Box::new(held)).with_loss_signal(lost, Some(expiry))
    }

    /// Forgets the attempt without cleanup (it wrote nothing).
    pub fn disarm(mut self) {
        self.set_armed(false);
    }
}

impl TakeBack for LockAttempt {
    /// Removes what this attempt wrote, finishing a write still in flight
    /// first (`cleanup.rs`).
    fn take_back(&mut self) -> impl Future<Output = ()> + Send + 'static {
        let written = Written {
            key: self.key.clone(),
            keys: self.keys.clone(),
            value: std::mem::take(&mut self.value),
            queue_key: self.queue_key.take(),
            slot: self.slot.take(),
            lease: self.lease.take(),
        };
        let inflight = self.in_doubt.take();
        let landing = self.landing.take();
        // Whether the write still on its way (this attempt's own, or the
        // one of its `lock_all` call) was answered, once it ends.
        let answered: Option<Landing> = match (inflight, landing) {
            (Some(write), _) => Some(Box::pin(async move { write.await.is_ok() })),
            (None, Some(mut landing)) => Some(Box::pin(async move {
                let landed = landing.wait_for(Option::is_some).await;
                landed.is_ok_and(|answered| *answered == Some(true))
            })),
            (None, None) => None,
        };
        let unanswered = self.in_doubt.unanswered;
        let cleanup = cleanup::abandon(Arc::clone(&self.state), written, answered, unanswered);
        async move {
            let _ = cleanup.await;
        }
    }
}
