//! Handing out the session lease, one per locker and shared by every key
//! it holds or waits for: granted on first use, renewed by a background
//! task (`renewal.rs`), and renewed again after it lapsed here only
//! (`revival.rs`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use etcd_client::Client;
use tokio::sync::Mutex;

use super::lease::LeaseState;
pub(crate) use super::lease::{Lease, LeaseEnd, margin};
use super::renewal::{Renewal, keep_alive};
use super::revival::{self, Holding, Leftovers};
use crate::etcd::client::error::EtcdResult;
use crate::etcd::client::request::request;
use crate::etcd::client::retry::{Budget, Retrying};

use crate::LossCause;

/// Hands out the current lease, granting a new one when the old was lost.
pub(crate) struct Session {
    client: Client,
    ttl_secs: i64,
    request_timeout: Duration,
    /// A key the locker may read (its prefix): the read that confirms a
    /// renewal (see `renewal.rs`).
    check_key: Vec<u8>,
    current: Mutex<Option<Arc<Lease>>>,
    /// Held by the one [`Session::lease`] or [`Session::revive`] call that
    /// waits for a lease to be ready; `current` is held only to read or
    /// replace it.
    handing_out: Mutex<()>,
    /// What stands in the way of reviving the current lease.
    leftovers: std::sync::Mutex<Leftovers>,
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
            leftovers: std::sync::Mutex::default(),
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
                    None => {
                        let lease = current.insert(Arc::new(self.grant().await?)).clone();
                        self.leftovers().keep_only(lease.id);
                        lease
                    }
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
        let ttl = Duration::from_secs(granted.ttl().max(1).unsigned_abs());
        Ok(self.renew(granted.id(), ttl, asked))
    }

    /// Starts renewing lease `id` (granted, or revived) with `ttl`, asked
    /// for at `asked`: its deadline is a TTL after that until a renewal
    /// counts.
    fn renew(&self, id: i64, ttl: Duration, asked: Instant) -> Lease {
        let state = LeaseState::new(asked, ttl);
        let renewal = Renewal {
            client: self.client.clone(),
            id,
            ttl,
            margin: margin(ttl),
            check_key: self.check_key.clone(),
            timeout: self.request_timeout,
        };
        Lease {
            id,
            ttl,
            asked,
            state: state.clone(),
            keepalive: tokio::spawn(keep_alive(renewal, state)).abort_handle(),
        }
    }

    /// The current lease id, without granting one.
    pub async fn current_id(&self) -> Option<i64> {
        self.current.lock().await.as_ref().map(|l| l.id)
    }

    /// Marks `id` lost, so the next attempt grants a fresh one.
    pub async fn forget(&self, id: i64, why: LeaseEnd) {
        let current = self.current.lock().await;
        if why == LeaseEnd::Distrusted {
            self.leftovers().refuse(id);
        }
        if let Some(lease) = current.as_ref().filter(|l| l.id == id) {
            if why == LeaseEnd::GoneInEtcd {
                lease.gone.store(true, Ordering::Release);
                lease.loss.record(LossCause::LeaseEnded);
            }
            lease.lost.cancel();
        }
    }

    fn leftovers(&self) -> std::sync::MutexGuard<'_, Leftovers> {
        self.leftovers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a lock held on lease `holding.lease`, until
    /// [`Session::released`]: a revival of that lease deletes its keys.
    pub fn hold(&self, holding: Holding) -> u64 {
        self.leftovers().hold(holding)
    }

    /// The holding `id` (see [`Session::hold`]) left nothing in etcd.
    pub fn released(&self, id: u64) {
        self.leftovers().released(id);
    }

    /// `old` was lost here but may live on in etcd: the lease that replaced
    /// it if [`Session::revive`] did so; otherwise `old` is never revived
    /// (its user could not remove its keys, and they must expire with it).
    pub async fn revived_or_refuse(&self, old: &Lease) -> Option<Arc<Lease>> {
        let current = self.current.lock().await;
        match current.as_ref() {
            Some(lease) if lease.id == old.id && !lease.lost.is_cancelled() => {
                Some(Arc::clone(lease))
            }
            _ => {
                self.leftovers().refuse(old.id);
                None
            }
        }
    }

    /// Renews `old` again, after it lapsed here (no renewal counted for a
    /// TTL, e.g. while the cluster had no leader) but not in etcd, so that
    /// the waiters on it keep their places in line. Every lock held on it
    /// was reported lost when it lapsed: their keys are deleted first, as
    /// etcd would have deleted them. `None` when etcd says it ended, when
    /// no renewal counts within twice its TTL plus the request timeout,
    /// when the locker already moved to a newer lease, or when it may carry
    /// keys nobody accounts for (see [`Session::revived_or_refuse`]).
    pub async fn revive(&self, old: &Lease) -> Option<Arc<Lease>> {
        if old.gone_in_etcd() || !old.confirmed() {
            return None;
        }
        let _one = self.handing_out.lock().await;
        let give_up = Instant::now() + old.ttl * 2 + self.request_timeout;
        loop {
            {
                let current = self.current.lock().await;
                match current.as_ref() {
                    Some(l) if l.id == old.id && !l.lost.is_cancelled() => {
                        return Some(Arc::clone(l)); // another waiter revived it
                    }
                    current if !self.may_revive(current, old.id) => return None,
                    _ => {}
                }
            }
            let lease = Arc::new(self.renew(old.id, old.ttl, Instant::now()));
            if lease.ready(margin(lease.ttl)).await {
                let mut retrying = Retrying::new(Budget::Until(give_up));
                let holdings = self.leftovers().holdings_on(old.id);
                for (id, holding) in holdings {
                    while let Err(e) =
                        revival::clear(&self.client, self.request_timeout, &holding).await
                    {
                        retrying.again(e).await.ok()?;
                    }
                    self.released(id);
                }
                let mut current = self.current.lock().await;
                if !self.may_revive(current.as_ref(), old.id) {
                    return None;
                }
                *current = Some(Arc::clone(&lease));
                return Some(lease);
            }
            if lease.gone_in_etcd() || Instant::now() >= give_up {
                return None;
            }
        }
    }

    /// Whether lease `id` may still be revived with `current` the locker's
    /// lease: no newer lease replaced it, and it may carry no keys nobody
    /// accounts for.
    fn may_revive(&self, current: Option<&Arc<Lease>>, id: i64) -> bool {
        current.is_none_or(|l| l.id == id) && !self.leftovers().is_refused(id)
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
        let mut retrying = Retrying::new(Budget::Until(Instant::now() + self.request_timeout * 2));
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
                Err(e) => {
                    retrying.again(e).await?;
                    retried = true;
                }
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
