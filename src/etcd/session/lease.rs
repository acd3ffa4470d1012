//! A session lease as the locker sees it: granted or revived by the
//! session (`handout.rs`), renewed by its keepalive task (`renewal.rs`), and
//! whether it may be used.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use crate::Expiry;
use crate::api::loss::LossCell;
use crate::etcd::client::error::EtcdError;
use crate::util::backoff::Backoff;

/// A granted lease and the task renewing it; its state ([`LeaseState`],
/// which it derefs to) is shared with that task.
pub(crate) struct Lease {
    pub id: i64,
    /// The TTL etcd granted.
    pub(super) ttl: Duration,
    pub(super) state: LeaseState,
    /// When the grant was asked for.
    pub(super) asked: Instant,
    pub(super) keepalive: AbortHandle,
}

/// A lease's state: written by its keepalive task (`renewal.rs`) and by
/// the session when etcd answers that the lease is gone, read by its
/// users. One copy, shared (every field is a shared handle).
#[derive(Clone)]
pub(crate) struct LeaseState {
    /// Cancelled once the lease is known or presumed expired, or the read
    /// confirming its first renewal was refused; the keepalive task
    /// cancels it last, when it ends.
    pub lost: CancellationToken,
    /// The last instant the lease is known alive (see [`margin`]).
    pub expiry: Expiry,
    /// Why the lease was lost: [`LossCause::LeaseEnded`] when etcd said it
    /// does not exist (revoked or expired), [`LossCause::Expired`] when the
    /// local deadline passed without an acknowledged renewal.
    pub loss: LossCell,
    /// Set when etcd said the lease does not exist, whatever was recorded
    /// as the loss cause before (the local deadline may have passed first).
    pub(super) gone: Arc<AtomicBool>,
    /// The number of renewals that counted (see `renewal.rs`).
    pub(super) renewed: watch::Sender<u64>,
    /// Why the renewals ended before one counted: the confirming read was
    /// refused (no permission on the key, credentials refused).
    pub(super) refused: Arc<std::sync::Mutex<Option<EtcdError>>>,
}

impl LeaseState {
    /// The state of a lease asked for at `asked` with `ttl`: its deadline
    /// is a TTL after that (less the margin) until a renewal counts.
    pub(super) fn new(asked: Instant, ttl: Duration) -> Self {
        LeaseState {
            lost: CancellationToken::new(),
            expiry: Expiry::new(asked + ttl - margin(ttl)),
            loss: LossCell::default(),
            gone: Arc::new(AtomicBool::new(false)),
            renewed: watch::Sender::new(0),
            refused: Arc::default(),
        }
    }
}

impl std::ops::Deref for Lease {
    type Target = LeaseState;

    fn deref(&self) -> &LeaseState {
        &self.state
    }
}

/// A tenth of the TTL, at most one second: how much earlier than etcd the
/// local deadline ends, and how long a waiter waits before it joins its
/// locker's vigil over the lock (see `lock/queue.rs`). Deadlines already count from when a
/// renewal was sent, not when it was answered; the margin covers
/// clock-rate drift and the time a holder needs to act on `is_held`.
pub(crate) fn margin(ttl: Duration) -> Duration {
    (ttl / 10).min(Duration::from_secs(1))
}

/// Why a lease is given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaseEnd {
    /// etcd said it does not exist (revoked or expired).
    GoneInEtcd,
    /// A write bound to it got no answer: it is no longer renewed, so
    /// whatever that write may still create expires within the TTL.
    Distrusted,
}

impl Lease {
    /// `true` once a renewal of it counted.
    pub(super) fn confirmed(&self) -> bool {
        *self.renewed.borrow() > 0
    }

    /// `true` while it may be handed out: not lost, a renewal of it
    /// counted, and its deadline at least `margin` away.
    pub(super) fn usable(&self, margin: Duration) -> bool {
        !self.lost.is_cancelled()
            && self.confirmed()
            && self.expiry.deadline() >= Instant::now() + margin
    }

    /// Waits until it is [usable](Lease::usable) (`true`), or until it is
    /// lost (`false`). Not longer than its deadline: the keepalive task
    /// ends the lease when that passes.
    pub(super) async fn ready(&self, margin: Duration) -> bool {
        let mut renewed = self.renewed.subscribe();
        loop {
            // Renewals from here on wake the wait below.
            renewed.mark_unchanged();
            if self.lost.is_cancelled() {
                return false;
            }
            if self.usable(margin) {
                return true;
            }
            tokio::select! {
                changed = renewed.changed() => {
                    if changed.is_err() {
                        // The keepalive task ended; it cancels `lost` last.
                        self.lost.cancelled().await;
                    }
                }
                () = self.lost.cancelled() => {}
            }
        }
    }

    /// The error for a lease none of whose renewals counted before it was
    /// lost: the refusal of the confirming read if that ended it.
    pub(super) fn unconfirmed(&self) -> EtcdError {
        let refused = self.refused.lock().ok().and_then(|mut r| r.take());
        refused.unwrap_or(EtcdError::Unconfirmed {
            id: self.id,
            within: self.asked.elapsed(),
        })
    }

    /// `true` once etcd said the lease does not exist.
    pub fn gone_in_etcd(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// Pauses before retrying a failed request, as long as `backoff`
    /// says; cut short when the lease is lost.
    pub async fn pause(&self, backoff: &mut Backoff) {
        tokio::select! {
            () = backoff.sleep() => {}
            () = self.lost.cancelled() => {}
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.keepalive.abort();
    }
}
