//! A held etcd lock: what its guard releases, what is known of the waiters
//! behind it, and the watch that tells its holder the lock was lost.

use std::sync::Arc;

use tokio::task::{AbortHandle, JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::api::loss::LossCell;
use crate::etcd::client::request::request;
use crate::etcd::protocol::keys::{LockKeys, Successor};
use crate::etcd::protocol::queue::{LOOKAHEAD, lookup_query, successors};
use crate::etcd::protocol::release::Holder;
use crate::etcd::session::handout::{Lease, margin};
use crate::etcd::session::held_key::{Change, until_changed};
use crate::etcd::session::queue_heads::KEEP;
use crate::etcd::session::revival::Holding;
use crate::etcd::session::slots::Slot;
use crate::etcd::session::state::LockerState;
use crate::util::observe;
use crate::{Key, LossCause};

/// A lock just granted: the result of `lock` or `try_lock` in etcd.
pub(crate) struct Grant {
    /// The revision at which the lock key became ours: the fencing token.
    pub token: i64,
    /// Our queue key's create revision, if we still have a queue key (a
    /// fair waiter keeps it until release).
    pub queue_rev: Option<i64>,
    /// What we know of the waiters behind us.
    pub behind: Behind,
    /// The session lease the lock key is bound to.
    pub lease: Arc<Lease>,
}

/// What a new holder knows of the waiters behind it.
pub(crate) enum Behind {
    /// Nobody waited when it got the lock: look only at release.
    Nobody,
    /// Others waited: look them up now, while the holder works.
    LookUp,
    /// Its grant passed them along, first in line first.
    Passed(Vec<Successor>),
}

/// The waiters behind a held lock, as far as a release will know them.
pub(crate) enum Lookahead {
    /// Not looked up (nobody waited at grant).
    Unknown,
    /// Being looked up.
    Pending(JoinHandle<Vec<Successor>>),
    /// Known, first in line first.
    Known(Vec<Successor>),
}

/// A held etcd lock: what a guard releases.
pub(crate) struct HeldLock {
    pub state: Arc<LockerState>,
    pub key: Key,
    pub keys: LockKeys,
    pub token: i64,
    /// Our queue key and its create revision (fair `lock` only).
    pub queue: Option<(Vec<u8>, i64)>,
    /// Keeps the session alive as long as the guard; its loss ends retries.
    pub lease: Arc<Lease>,
    /// The waiters behind us: passed with the grant, or read at grant
    /// when others were waiting.
    pub lookahead: Lookahead,
    /// The watch on the lock key, once the owner asked for loss signals.
    watcher: std::sync::Mutex<Option<AbortHandle>>,
    /// The slot naming our queue key, freed once the release deleted it.
    pub slot: Option<Slot>,
    /// Why the lock-key watch saw the lock lost.
    pub loss: LossCell,
    /// Names this holding in the session's record (see `session/revival.rs`) until
    /// a release leaves nothing of it in etcd.
    pub holding: u64,
}

impl HeldLock {
    /// The lock `grant` gave: `key` with its etcd `keys`, and our queue key
    /// if we wrote one. With [`Behind::LookUp`] the successors are looked
    /// up now, while the caller works, so the release needs no read.
    pub fn new(
        state: Arc<LockerState>,
        key: Key,
        keys: LockKeys,
        queue_key: Option<Vec<u8>>,
        grant: Grant,
        slot: Option<Slot>,
    ) -> Self {
        let queue = queue_key.zip(grant.queue_rev);
        let after = queue.as_ref().map_or(0, |q| q.1);
        let lookahead = match grant.behind {
            Behind::Nobody => Lookahead::Unknown,
            Behind::Passed(list) if !list.is_empty() => Lookahead::Known(list),
            Behind::LookUp | Behind::Passed(_) => {
                let (state, queue_prefix) = (Arc::clone(&state), keys.queue.clone());
                Lookahead::Pending(tokio::spawn(async move {
                    lookup(&state, &queue_prefix, after).await
                }))
            }
        };
        let holding = state.session.hold(Holding {
            lease: grant.lease.id,
            lock: keys.lock.clone(),
            token: grant.token,
            queue: queue.clone(),
        });
        HeldLock {
            holding,
            state,
            key,
            keys,
            token: grant.token,
            queue,
            lease: grant.lease,
            lookahead,
            watcher: std::sync::Mutex::new(None),
            slot,
            loss: LossCell::default(),
        }
    }

    /// This holding as the release txns see it (`protocol/release.rs`).
    pub fn holder(&self) -> Holder<'_> {
        Holder {
            keys: &self.keys,
            token: self.token,
            queue: self.queue.as_ref(),
        }
    }

    /// Cancels `lost` when the lock key changes (see [`watch_lock_key`]);
    /// outside a runtime only the lease deadline and session signal loss.
    pub fn watch_lock(&self, lost: CancellationToken) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let task = rt.spawn(watch_lock_key(
            Arc::clone(&self.state),
            self.keys.lock.clone(),
            (self.token, Arc::clone(&self.lease)),
            (lost, self.loss.clone()),
        ));
        if let Ok(mut watcher) = self.watcher.lock() {
            *watcher = Some(task.abort_handle());
        }
    }

    /// Stops the lock-key watch: our own release changes that key.
    pub fn stop_watching(&self) {
        let watcher = self.watcher.lock().map(|mut w| w.take());
        if let Ok(Some(watcher)) = watcher {
            watcher.abort();
        }
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        if let Lookahead::Pending(lookup) = &self.lookahead {
            lookup.abort();
        }
        self.stop_watching();
    }
}

/// Cancels `lost` when the lock key changes after our grant at `token`:
/// deleted (lease expired, someone deleted it) or overwritten. Only our own
/// release may change it while we hold it, and that stops this watch first.
async fn watch_lock_key(
    state: Arc<LockerState>,
    lock: Vec<u8>,
    (token, lease): (i64, Arc<Lease>),
    (lost, loss): (CancellationToken, LossCell),
) {
    if let Some(rewritten) = until_changed(&state, &lock, (token, Change::Any), &lost).await {
        loss.record(key_change_cause(&state, &lease, rewritten).await);
        observe::loss_cause("etcd", format_args!("token {token}"), "lock key changed");
        lost.cancel();
    }
}

/// Why the lock key changed under us: the lease ended (etcd deleted the
/// key with it) or someone else deleted or rewrote the key. A deletion by
/// lease expiry looks like any other in the watch, so for a deletion the
/// lease is asked, for at most a tenth of the TTL (the holder is told of
/// the loss only then; a rewrite is told at once).
async fn key_change_cause(state: &LockerState, lease: &Lease, rewritten: bool) -> LossCause {
    if let Some(cause) = lease.loss.get() {
        return cause;
    }
    if rewritten {
        return LossCause::KeyChanged;
    }
    let mut client = state.client.clone();
    let limit = margin(state.config.ttl()).min(state.config.request_timeout());
    let asked = request(
        "lease check",
        limit,
        client.lease_time_to_live(lease.id, None),
    )
    .await;
    match asked {
        // etcd rounds the time left down to whole seconds: 0 is alive;
        // an expired or revoked lease answers -1.
        Ok(answer) if answer.ttl() >= 0 => LossCause::KeyChanged,
        Ok(_) => LossCause::LeaseEnded,
        Err(e) if e.is_lease_not_found() => LossCause::LeaseEnded,
        // etcd did not answer: the key changed; the lease may follow.
        Err(_) => LossCause::KeyChanged,
    }
}

/// The waiters among the first [`LOOKAHEAD`] queue entries after revision
/// `after` (see `protocol/queue.rs`): those the locker kept from an
/// earlier lookup when `after` is our own entry's (the line behind it,
/// see `session/queue_heads.rs`), else read, keeping up to
/// [`KEEP`] for the locker's next holders.
pub(crate) async fn lookup(state: &LockerState, queue_prefix: &[u8], after: i64) -> Vec<Successor> {
    if after > 0 {
        let kept = state.heads.after(queue_prefix, after, LOOKAHEAD);
        if !kept.is_empty() {
            return kept;
        }
    }
    let query = lookup_query(after).with_limit(KEEP as i64);
    match state
        .get("successor lookup", queue_prefix.to_vec(), query)
        .await
    {
        Ok(resp) => {
            let mut waiters = successors(queue_prefix, &resp).0;
            state.heads.keep(queue_prefix, &waiters);
            waiters.truncate(LOOKAHEAD);
            waiters
        }
        Err(_) => Vec::new(),
    }
}
