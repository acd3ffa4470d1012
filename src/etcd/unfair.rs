//! Unfair mode: create the lock key if free; otherwise wait for its
//! deletion and try again.
//!
//! The deletion is seen through the locker's long-lived watch on the lock
//! key, opened before the first try so that no deletion between the try and
//! the wait can be missed.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, Txn};

use super::fair::internal;
use super::locker::{Attempt, put_leased, revision};
use super::watch::WatchMsg;
use crate::{LockGuard, Result};

pub(crate) async fn acquire(slot: &mut Option<Attempt>) -> Result<LockGuard> {
    let attempt = slot.as_ref().ok_or_else(internal)?;
    let inner = Arc::clone(&attempt.inner);
    let (key, lock, value) = (
        attempt.key.clone(),
        attempt.layout.lock.clone(),
        attempt.value.clone(),
    );
    loop {
        // Only a locker that has waited on this key keeps a watch on it; a
        // new watch is opened after a failed try, and the try repeated, so
        // no deletion can fall between the try and the wait.
        let listener = inner.shared.existing(&lock, None).await;
        let lease = inner.session.lease().await?;
        let take = Txn::new()
            .when([Compare::create_revision(lock.clone(), CompareOp::Equal, 0)])
            .and_then([put_leased(&lock, &value, lease.id)]);
        let resp = match inner.txn("try_lock", take).await {
            Ok(resp) => resp,
            Err(e) => return Err(inner.lease_error(&key, &lease, e).await),
        };
        let rev = revision(&resp);
        if resp.succeeded() {
            let attempt = slot.take().ok_or_else(internal)?;
            return Ok(attempt.granted(rev, None, lease, false));
        }
        let Some(mut deleted) = listener else {
            inner.shared.listen(&lock, None).await?;
            continue;
        };
        inner.shared.touch(&lock, None).await;
        loop {
            match deleted.recv().await {
                WatchMsg::Events { events } => {
                    if events
                        .iter()
                        .any(|e| !e.put && e.key == lock && e.mod_revision > rev)
                    {
                        break;
                    }
                }
                WatchMsg::Ended(_) => break,
                WatchMsg::Created => {}
            }
        }
    }
}
