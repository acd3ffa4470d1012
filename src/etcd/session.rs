//! The session lease: one per locker, kept alive by a background task and
//! shared by every key the locker holds or waits for.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use etcd_client::Client;
use tokio::sync::{Mutex, watch};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use super::error::{EtcdError, EtcdResult};
use super::renewal::{Renewal, Signals, keep_alive};
use super::request::{request, retry_backoff};
use crate::backoff::Backoff;
use crate::loss::LossCell;
use crate::{Expiry, LossCause};

/// A granted lease and the task renewing it.
pub(crate) struct Lease {
    pub id: i64,
    /// The TTL etcd granted.
    ttl: Duration,
    /// Cancelled once the lease is known or presumed expired, or the read
    /// confirming its first renewal was refused.
    pub lost: CancellationToken,
    /// The last instant the lease is known alive (see [`margin`]).
    pub expiry: Expiry,
    /// Why the lease was lost: [`LossCause::LeaseEnded`] when etcd said it
    /// does not exist (revoked or expired), [`LossCause::Expired`] when the
    /// local deadline passed without an acknowledged renewal.
    pub loss: LossCell,
    /// Set when etcd said the lease does not exist, whatever was recorded
    /// as the loss cause before (the local deadline may have passed first).
    gone: Arc<AtomicBool>,
    /// The number of renewals that counted (see `renewal.rs`).
    renewed: watch::Receiver<u64>,
    /// Why the renewals ended before one counted: the confirming read was
    /// refused.
    refused: Arc<std::sync::Mutex<Option<EtcdError>>>,
    /// When the grant was asked for.
    asked: Instant,
    keepalive: AbortHandle,
}

/// A tenth of the TTL, at most one second: how much earlier than etcd the
/// local deadline ends, and how long a waiter waits before it also watches
/// its predecessor (see `queue.rs`). Deadlines already count from when a
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
    fn confirmed(&self) -> bool {
        *self.renewed.borrow() > 0
    }

    /// `true` while it may be handed out: not lost, a renewal of it
    /// counted, and its deadline at least `margin` away.
    fn usable(&self, margin: Duration) -> bool {
        !self.lost.is_cancelled()
            && self.confirmed()
            && self.expiry.deadline() >= Instant::now() + margin
    }

    /// Waits until it is [usable](Lease::usable) (`true`), or until it is
    /// lost (`false`). Not longer than its deadline: the keepalive task
    /// ends the lease when that passes.
    async fn ready(&self, margin: Duration) -> bool {
        let mut renewed = self.renewed.clone();
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
    fn unconfirmed(&self) -> EtcdError {
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

/// Hands out the current lease, granting a new one when the old was lost.
pub(crate) struct Session {
    client: Client,
    ttl_secs: i64,
    request_timeout: Duration,
    /// A key the locker may read (its prefix): the read that confirms a
    /// renewal (see `renewal.rs`).
    check_key: Vec<u8>,
    current: Mutex<Option<Arc<Lease>>>,
    /// Held by the one [`Session::lease`] call that waits for a lease to
    /// be ready; `current` is held only to read or replace it.
    handing_out: Mutex<()>,
}

impl Session {
    pub fn new(
        client: Client,
        ttl_secs: i64,
        request_timeout: Duration,
        check_key: Vec<u8>,
    ) -> Self {
        Session {
            client,
            ttl_secs,
            request_timeout,
            check_key,
            current: Mutex::new(None),
            handing_out: Mutex::new(()),
        }
    }

    /// The live lease, granted on first use: handed out only once a
    /// renewal of it counted (see `renewal.rs`) and while its local
    /// deadline is at least [`margin`] away. A lease asked for while etcd
    /// was unreachable and granted late has little of its TTL left when it
    /// arrives; the first renewal that counts moves its deadline to a TTL
    /// after that renewal was sent. Waits for that renewal, for a renewal
    /// of a lease near its deadline, or for a fresh lease when the current
    /// one is lost meanwhile. One caller waits at a time; the others wait
    /// for it, then take the same lease. [`Session::forget`],
    /// [`Session::revoke`] and [`Session::current_id`] do not wait for it.
    ///
    /// Errors: the grant's; the refusal of the read that confirms the
    /// first renewal (no read permission on the prefix, refused
    /// credentials); [`EtcdError::Unconfirmed`] when no renewal of a fresh
    /// lease counted before its local deadline (it is not used, and
    /// expires in etcd).
    pub async fn lease(&self) -> EtcdResult<Arc<Lease>> {
        // The common case, on every write: the current lease is usable, and
        // the caller need not queue behind one that waits for a renewal.
        if let Some(lease) = self
            .current
            .lock()
            .await
            .as_ref()
            .filter(|l| l.usable(margin(l.ttl)))
        {
            return Ok(Arc::clone(lease));
        }
        let _one = self.handing_out.lock().await;
        loop {
            let lease = {
                let mut current = self.current.lock().await;
                match current.as_ref().filter(|l| !l.lost.is_cancelled()) {
                    Some(lease) => Arc::clone(lease),
                    None => current.insert(Arc::new(self.grant().await?)).clone(),
                }
            };
            if lease.ready(margin(lease.ttl)).await {
                return Ok(lease);
            }
            if !lease.confirmed() {
                let mut current = self.current.lock().await;
                if current.as_ref().is_some_and(|l| l.id == lease.id) {
                    current.take();
                }
                self.revoke_later(lease.id);
                return Err(lease.unconfirmed());
            }
            // Lost after it served: a fresh one.
        }
    }

    /// Grants a lease and starts renewing it.
    async fn grant(&self) -> EtcdResult<Lease> {
        let mut client = self.client.clone();
        let asked = Instant::now();
        let granted = request(
            "lease grant",
            self.request_timeout,
            client.lease_grant(self.ttl_secs, None),
        )
        .await?;
        let id = granted.id();
        let ttl = Duration::from_secs(granted.ttl().max(1).unsigned_abs());
        let (renewed, renewals) = watch::channel(0);
        let signals = Signals {
            lost: CancellationToken::new(),
            expiry: Expiry::new(asked + ttl - margin(ttl)),
            loss: LossCell::default(),
            gone: Arc::new(AtomicBool::new(false)),
            renewed,
            refused: Arc::default(),
        };
        let renewal = Renewal {
            client: self.client.clone(),
            id,
            ttl,
            margin: margin(ttl),
            check_key: self.check_key.clone(),
            timeout: self.request_timeout,
        };
        let lease = Lease {
            id,
            ttl,
            asked,
            lost: signals.lost.clone(),
            expiry: signals.expiry.clone(),
            loss: signals.loss.clone(),
            gone: Arc::clone(&signals.gone),
            renewed: renewals,
            refused: Arc::clone(&signals.refused),
            keepalive: tokio::spawn(keep_alive(renewal, signals)).abort_handle(),
        };
        Ok(lease)
    }

    /// The current lease id, without granting one.
    pub async fn current_id(&self) -> Option<i64> {
        self.current.lock().await.as_ref().map(|l| l.id)
    }

    /// Marks `id` lost, so the next attempt grants a fresh one.
    pub async fn forget(&self, id: i64, why: LeaseEnd) {
        let current = self.current.lock().await;
        if let Some(lease) = current.as_ref().filter(|l| l.id == id) {
            if why == LeaseEnd::GoneInEtcd {
                lease.gone.store(true, Ordering::Release);
                lease.loss.record(LossCause::LeaseEnded);
            }
            lease.lost.cancel();
        }
    }

    /// Revokes the current lease, deleting every key attached to it.
    /// Failures that may pass (a member down, an election) are retried
    /// for up to two request timeouts; a lease that etcd no longer knows
    /// on a retry (or after it was lost) was revoked by the earlier try,
    /// or expired.
    pub async fn revoke(&self) -> EtcdResult<()> {
        let Some(lease) = self.current.lock().await.take() else {
            return Ok(());
        };
        // A lease already given up on may have expired in etcd too.
        let mut retried = lease.lost.is_cancelled();
        lease.lost.cancel();
        let give_up = std::time::Instant::now() + self.request_timeout * 2;
        let mut backoff = retry_backoff();
        loop {
            let mut client = self.client.clone();
            let result = request(
                "lease revoke",
                self.request_timeout,
                client.lease_revoke(lease.id),
            )
            .await;
            match result {
                Ok(_) => return Ok(()),
                Err(e) if retried && e.is_lease_not_found() => return Ok(()),
                Err(e) if e.is_transient() && std::time::Instant::now() < give_up => {
                    retried = true;
                    backoff.sleep().await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Revokes lease `id` in the background, once; a failure is left to
    /// the lease's expiry in etcd.
    fn revoke_later(&self, id: i64) {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let mut client = self.client.clone();
            let timeout = self.request_timeout;
            rt.spawn(async move {
                let _ = request("lease revoke", timeout, client.lease_revoke(id)).await;
            });
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let Some(lease) = self.current.get_mut().take() else {
            return;
        };
        lease.lost.cancel();
        self.revoke_later(lease.id);
    }
}
