//! Removing what an abandoned attempt wrote: its queue key, or, if the
//! lock was granted to it meanwhile, the lock itself (released properly,
//! handed on to the next waiter).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::held_lock::{Behind, Grant, HeldLock};
use super::release;
use crate::Key;
use crate::etcd::client::error::EtcdResult;
use crate::etcd::client::request::retry_backoff;
use crate::etcd::protocol::abandon::{self, Abandoned};
use crate::etcd::protocol::keys::LockKeys;
use crate::etcd::session::handout::{Lease, LeaseEnd};
use crate::etcd::session::slots::Slot;
use crate::etcd::session::state::LockerState;

/// The end of a write still on its way when an attempt was abandoned:
/// `true` if it was answered.
pub(crate) type Landing = Pin<Box<dyn Future<Output = bool> + Send>>;

/// What an abandoned attempt may have written.
pub(crate) struct Written {
    pub key: Key,
    pub keys: LockKeys,
    pub value: Vec<u8>,
    pub queue_key: Option<Vec<u8>>,
    pub slot: Option<Slot>,
    /// The lease its writes used; none means nothing was written.
    pub lease: Option<Arc<Lease>>,
}

/// Deletes an abandoned attempt's queue key; if the lock key was granted to
/// it meanwhile, releases it properly (handing it on). Retries with backoff
/// until done or the lease is lost (its keys then expire with it).
pub(crate) async fn abandon(
    state: Arc<LockerState>,
    mut written: Written,
    inflight: Option<Landing>,
    unanswered: bool,
) -> EtcdResult<()> {
    // Wait for a write still in flight: its outcome is what we clean up.
    let unanswered = unanswered
        || match inflight {
            Some(write) => !write.await,
            None => false,
        };
    let mut slot = written.slot.take();
    let Some(mut lease) = written.lease.take() else {
        if let Some(slot) = slot {
            slot.free();
        }
        return Ok(()); // nothing was written
    };
    if unanswered {
        // The write got no answer: etcd may still apply it after our
        // cleanup (requests on one connection are not applied in send
        // order). Stop renewing this lease so that whatever it may still
        // create expires within the TTL; the locker takes a fresh lease.
        state.session.forget(lease.id, LeaseEnd::Distrusted).await;
    }
    let mut backoff = retry_backoff();
    // Set once a cleanup request failed: it may still be applied later, so
    // the slot is retired rather than reused.
    let mut uncertain = unanswered;
    loop {
        match abandon_once(&state, &written, &mut slot, uncertain, &lease).await {
            Ok(()) => {
                if let Some(slot) = slot.filter(|_| !uncertain) {
                    slot.free();
                }
                return Ok(());
            }
            // Lost here: if waiters revived it (see `Session::revive`), its
            // keys live on, so keep removing ours; if not, it is never
            // revived and they expire with it.
            Err(e) if lease.lost.is_cancelled() => {
                uncertain = true;
                match state.session.revived_or_refuse(&lease).await {
                    Some(revived) => lease = revived,
                    None => return Err(e),
                }
            }
            Err(_) => {
                uncertain = true;
                lease.pause(&mut backoff).await;
            }
        }
    }
}

/// One cleanup txn (see `protocol/abandon.rs`): delete our queue key
/// unless the lock key holds our value; if it does, release the lock.
/// `uncertain`: a write of this attempt got no answer, so the slot must be
/// retired, not freed: the release then does not get it.
async fn abandon_once(
    state: &Arc<LockerState>,
    written: &Written,
    slot: &mut Option<Slot>,
    uncertain: bool,
    lease: &Arc<Lease>,
) -> EtcdResult<()> {
    let Written {
        key,
        keys,
        value,
        queue_key,
        ..
    } = written;
    let txn = abandon::abandon(keys, value, queue_key.as_deref());
    let resp = state.txn("abandon", txn).await?;
    let (lock, queue_rev) = match abandon::read_abandon(&resp) {
        Abandoned::Removed => {
            if queue_key.is_some() && !resp.succeeded() {
                release::serve_if_free(state, keys).await;
            }
            return Ok(());
        }
        Abandoned::Granted { lock, queue_rev } => (lock, queue_rev),
    };
    let grant = Grant {
        token: lock.mod_revision(),
        queue_rev,
        behind: Behind::LookUp,
        lease: Arc::clone(lease),
    };
    let held = HeldLock::new(
        Arc::clone(state),
        key.clone(),
        keys.clone(),
        queue_key.clone(),
        grant,
        slot.take().filter(|_| !uncertain),
    );
    match release::release(held).await {
        Err(e) if !e.is_lock_lost() => Err(e),
        _ => Ok(()),
    }
}
