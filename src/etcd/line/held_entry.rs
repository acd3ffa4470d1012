//! A held read lock, write lock or permit: what its guard releases, and the
//! watch that tells its holder it was lost.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use super::depart::{LineEntry, depart};
use crate::api::loss::LossCell;
use crate::etcd::client::error::{EtcdError, EtcdResult};
use crate::etcd::client::request::retry_backoff;
use crate::etcd::protocol::line_txn::held_since;
use crate::etcd::session::handout::Lease;
use crate::etcd::session::held_key::{Change, until_changed};
use crate::etcd::session::revival::Holding;
use crate::etcd::session::slots::Slot;
use crate::etcd::session::state::LockerState;
use crate::{Error, GuardRelease, Key, LossCause, Result};

/// A held entry of a line: what a guard releases.
pub(crate) struct HeldEntry {
    pub line: Arc<LineEntry>,
    /// The revision of the grant: the entry's mod revision since.
    pub token: i64,
    /// The slot naming the entry, freed once the release deleted it.
    slot: Option<Slot>,
    /// Names this holding in the session's record (see
    /// `session/revival.rs`) until its release.
    holding: u64,
    watcher: std::sync::Mutex<Option<AbortHandle>>,
    loss: LossCell,
}

impl HeldEntry {
    /// The holding of `entry` granted at `token`; recorded with the
    /// session, so that a revived lease first deletes it, as etcd would
    /// have had the lease expired.
    pub fn new(line: Arc<LineEntry>, token: i64, slot: Option<Slot>) -> Self {
        let holding = line.state.session.hold(Holding {
            lease: line.lease.id,
            lock: line.entry.clone(),
            token,
            queue: None,
        });
        HeldEntry {
            line,
            token,
            slot,
            holding,
            watcher: std::sync::Mutex::new(None),
            loss: LossCell::default(),
        }
    }

    fn stop_watching(&self) {
        if let Ok(Some(w)) = self.watcher.lock().map(|mut w| w.take()) {
            w.abort();
        }
    }

    /// Leaves the line, retried until done, lost, or the lease is lost
    /// (the entry then expires with it).
    async fn release_durably(mut self) -> EtcdResult<()> {
        let mut backoff = retry_backoff();
        let mut uncertain = false;
        let leaving = self.line.leaving();
        let outcome = loop {
            match depart(
                &self.line.state,
                &leaving,
                held_since(&self.line.entry, self.token),
            )
            .await
            {
                Ok(true) => break Ok(()),
                // An earlier attempt that got no answer was applied.
                Ok(false) if uncertain && !self.line.lease.lost.is_cancelled() => break Ok(()),
                Ok(false) => break Err(lost(&self.line.key, "its entry was deleted or rewritten")),
                Err(_) if self.line.lease.lost.is_cancelled() => {
                    break Err(lost(
                        &self.line.key,
                        "the session lease was lost before the release",
                    ));
                }
                Err(_) => {
                    uncertain = true;
                    self.line.lease.pause(&mut backoff).await;
                }
            }
        };
        self.line.state.session.released(self.holding);
        if let (Some(slot), false) = (self.slot.take(), uncertain) {
            slot.free();
        }
        outcome
    }
}

fn lost(key: &Key, why: &str) -> EtcdError {
    EtcdError::Public(Error::LockLost {
        key: key.to_string(),
        reason: format!("{why} (did the session lease expire?)"),
    })
}

impl Drop for HeldEntry {
    fn drop(&mut self) {
        self.stop_watching();
    }
}

#[async_trait]
impl GuardRelease for HeldEntry {
    async fn release(self: Box<Self>) -> Result<()> {
        self.stop_watching();
        Ok(self.release_durably().await?)
    }

    fn watch_for_loss(&self, lost: CancellationToken) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let task = rt.spawn(watch_entry(
            Arc::clone(&self.line.state),
            (self.line.entry.clone(), self.token),
            Arc::clone(&self.line.lease),
            (lost, self.loss.clone()),
        ));
        if let Ok(mut w) = self.watcher.lock() {
            *w = Some(task.abort_handle());
        }
    }

    fn loss_cause(&self) -> Option<LossCause> {
        self.loss.get().or_else(|| self.line.lease.loss.get())
    }
}

/// Cancels `lost` when `entry` changes after the grant at `token`: deleted
/// (its lease ended, or someone deleted it) or rewritten. Only the
/// holder's own release changes it while held, and that stops this watch
/// first.
async fn watch_entry(
    state: Arc<LockerState>,
    (entry, token): (Vec<u8>, i64),
    lease: Arc<Lease>,
    (lost, loss): (CancellationToken, LossCell),
) {
    if until_changed(&state, &entry, (token, Change::Any), &lost)
        .await
        .is_some()
    {
        loss.record(lease.loss.get().unwrap_or(LossCause::KeyChanged));
        lost.cancel();
    }
}
