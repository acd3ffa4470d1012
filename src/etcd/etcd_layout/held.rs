//! A lock held in etcd's layout: its key, whose deletion is the release
//! (the next contender is first once it is gone, whoever it is), and the
//! watch that tells the holder the key went otherwise.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use super::leases::ContenderLease;
use crate::api::guard::GuardRelease;
use crate::api::loss::LossCell;
use crate::etcd::client::error::{EtcdError, EtcdResult};
use crate::etcd::client::request::retry_backoff;
use crate::etcd::protocol::etcd_layout;
use crate::etcd::session::handout::Lease;
use crate::etcd::session::held_key::{Change, until_changed};
use crate::etcd::session::state::LockerState;
use crate::{Error, Key, LossCause, Result};

/// A held lock in etcd's layout: what its guard releases.
pub(crate) struct HeldContender {
    pub state: Arc<LockerState>,
    pub key: Key,
    /// Our key, `N/<lease hex>`.
    pub own: Vec<u8>,
    /// Its create revision: the fencing token.
    pub rev: i64,
    pub lease: Arc<Lease>,
    /// Ends with the release (a lease of the call's own is revoked).
    pub leased: Option<ContenderLease>,
    /// Names this holding in the session's record (see
    /// `session/revival.rs`) until its key is known deleted.
    pub holding: u64,
    /// Passes the end of a lease of the call's own on to the guard while
    /// it holds (see `Contender::granted`).
    pub forward: Option<AbortHandle>,
    watcher: std::sync::Mutex<Option<AbortHandle>>,
    loss: LossCell,
}

impl HeldContender {
    pub fn new(
        state: Arc<LockerState>,
        key: Key,
        (own, rev): (Vec<u8>, i64),
        lease: Arc<Lease>,
        leased: Option<ContenderLease>,
    ) -> Self {
        let holding = state.session.hold(crate::etcd::session::revival::Holding {
            lease: lease.id,
            lock: own.clone(),
            token: rev,
            queue: None,
        });
        HeldContender {
            state,
            key,
            own,
            rev,
            lease,
            leased,
            holding,
            forward: None,
            watcher: std::sync::Mutex::new(None),
            loss: LossCell::default(),
        }
    }

    fn stop_watching(&self) {
        if let Some(forward) = &self.forward {
            forward.abort();
        }
        let watcher = self.watcher.lock().map(|mut w| w.take());
        if let Ok(Some(watcher)) = watcher {
            watcher.abort();
        }
    }

    /// Deletes our key if it is still the one we created: retried with
    /// backoff until done, the key turns out gone, or the lease is lost
    /// (the key then expires with it).
    async fn release_durably(&mut self) -> EtcdResult<()> {
        let mut backoff = retry_backoff();
        // Set once a request got no answer: it may have been applied.
        let mut uncertain = false;
        loop {
            let sent = self
                .state
                .txn("unlock", etcd_layout::release(&self.own, self.rev))
                .await;
            match sent {
                Ok(answer) if answer.succeeded() => return Ok(()),
                // Our lease is alive, so the key cannot have expired: an
                // earlier copy of this release was applied.
                Ok(_) if uncertain && !self.lease.lost.is_cancelled() => return Ok(()),
                Ok(_) => {
                    return Err(lost(
                        &self.key,
                        "its key was gone before the release: the session lease ended \
                         or someone deleted it",
                    ));
                }
                Err(_) if self.lease.lost.is_cancelled() => {
                    return Err(lost(
                        &self.key,
                        "the session lease was lost before the release could reach etcd; \
                         the lock expires with it",
                    ));
                }
                Err(_) => {
                    uncertain = true;
                    self.lease.pause(&mut backoff).await;
                }
            }
        }
    }
}

fn lost(key: &Key, why: &str) -> EtcdError {
    EtcdError::Public(Error::LockLost {
        key: key.to_string(),
        reason: why.to_owned(),
    })
}

impl Drop for HeldContender {
    fn drop(&mut self) {
        self.stop_watching();
    }
}

#[async_trait]
impl GuardRelease for HeldContender {
    async fn release(mut self: Box<Self>) -> Result<()> {
        self.stop_watching();
        let released = self.release_durably().await;
        // Whether released or lost, nothing of ours is left in etcd
        // unless the lease lives on and the key could not be reached.
        let deleted = released.is_ok() || !self.lease.lost.is_cancelled();
        if deleted {
            self.state.session.released(self.holding);
        }
        if let Some(leased) = self.leased.take() {
            leased.done(deleted);
        }
        Ok(released?)
    }

    fn watch_for_loss(&self, lost: CancellationToken) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (state, own, rev) = (Arc::clone(&self.state), self.own.clone(), self.rev);
        let (lease, loss) = (Arc::clone(&self.lease), self.loss.clone());
        let task = rt.spawn(async move {
            if until_changed(&state, &own, (rev, Change::Deleted), &lost)
                .await
                .is_some()
            {
                loss.record(lease.loss.get().unwrap_or(LossCause::KeyChanged));
                lost.cancel();
            }
        });
        if let Ok(mut watcher) = self.watcher.lock() {
            *watcher = Some(task.abort_handle());
        }
    }

    fn loss_cause(&self) -> Option<LossCause> {
        self.loss.get().or_else(|| self.lease.loss.get())
    }
}
