//! The session lease: one per locker, kept alive by a background task and
//! shared by every key the locker holds or waits for.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use etcd_client::{Client, GetOptions};
use tokio::sync::Mutex;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use super::error::EtcdResult;
use super::request::{request, retry_backoff};
use crate::backoff::Backoff;
use crate::loss::LossCell;
use crate::{Expiry, LossCause, observe};

/// A granted lease and the task renewing it.
pub(crate) struct Lease {
    pub id: i64,
    /// Cancelled once the lease is known or presumed expired.
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
    /// renewal (see [`renew`]).
    check_key: Vec<u8>,
    current: Mutex<Option<Arc<Lease>>>,
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
        }
    }

    /// The live lease, granted on first use.
    pub async fn lease(&self) -> EtcdResult<Arc<Lease>> {
        let mut current = self.current.lock().await;
        if let Some(lease) = current.as_ref().filter(|l| !l.lost.is_cancelled()) {
            return Ok(Arc::clone(lease));
        }
        let mut client = self.client.clone();
        let asked = std::time::Instant::now();
        let granted = request(
            "lease grant",
            self.request_timeout,
            client.lease_grant(self.ttl_secs, None),
        )
        .await?;
        let id = granted.id();
        let ttl = Duration::from_secs(granted.ttl().max(1).unsigned_abs());
        let lost = CancellationToken::new();
        let expiry = Expiry::new(asked + ttl - margin(ttl));
        let loss = LossCell::default();
        let gone = Arc::new(AtomicBool::new(false));
        let renewal = Renewal {
            client: self.client.clone(),
            id,
            ttl,
            check_key: self.check_key.clone(),
            timeout: self.request_timeout,
        };
        let task = tokio::spawn(keep_alive(
            renewal,
            (
                lost.clone(),
                expiry.clone(),
                loss.clone(),
                Arc::clone(&gone),
            ),
        ));
        let lease = Arc::new(Lease {
            id,
            lost,
            expiry,
            loss,
            gone,
            keepalive: task.abort_handle(),
        });
        *current = Some(Arc::clone(&lease));
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
}

impl Drop for Session {
    fn drop(&mut self) {
        let Some(lease) = self.current.get_mut().take() else {
            return;
        };
        lease.lost.cancel();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let mut client = self.client.clone();
            let timeout = self.request_timeout;
            rt.spawn(async move {
                let _ = request("lease revoke", timeout, client.lease_revoke(lease.id)).await;
            });
        }
    }
}

/// What the keepalive task needs to renew one lease.
struct Renewal {
    client: Client,
    id: i64,
    ttl: Duration,
    check_key: Vec<u8>,
    timeout: Duration,
}

/// Keeps the lease alive until it is lost: etcd says it expired, or the
/// local deadline passes without an acknowledged renewal (etcd unreachable,
/// or this process paused). Either way `lost` is cancelled and the deadline
/// ends, so no guard reports the lock held any longer.
async fn keep_alive(
    renewal: Renewal,
    (lost, expiry, loss, gone): (CancellationToken, Expiry, LossCell, Arc<AtomicBool>),
) {
    let id = renewal.id;
    tokio::select! {
        () = renew(&renewal, &expiry) => {
            gone.store(true, Ordering::Release);
            loss.record(LossCause::LeaseEnded);
            observe::loss_cause("etcd", format_args!("lease {id:x}"), "etcd says the lease is gone");
        }
        () = expiry.passed() => {
            loss.record(LossCause::Expired);
            observe::loss_cause("etcd", format_args!("lease {id:x}"), "no renewal acknowledged in time");
        }
        () = lost.cancelled() => {}
    }
    lost.cancel();
    expiry.expire();
}

/// Renews the lease every TTL/3, moving `expiry` on each renewal that
/// counts (see [`counts`]); returns when etcd says the lease is gone.
///
/// etcd 3.4 before 3.4.25 and 3.5 before 3.5.8 let a leader that was
/// stalled (paused, or stuck on a slow disk) answer renewals after the
/// rest of the cluster elected a new one: the new leader never saw them,
/// so the lease expires there while this client believes it renewed.
/// A renewal therefore counts only when a linearizable read sent after its
/// answer is answered in the same raft term: a read confirms that the
/// term's leader still had a quorum, and a new leader extends every lease
/// by the TTL when it takes over.
async fn renew(renewal: &Renewal, expiry: &Expiry) {
    let Renewal {
        client, id, ttl, ..
    } = renewal;
    let (id, ttl) = (*id, *ttl);
    let period = ttl / 3;
    let margin = margin(ttl);
    // Pause before reconnecting after a failure, so a dead endpoint is not
    // hammered; the deadline, not this loop, decides when to give up.
    let retry = Duration::from_millis(200);
    'reconnect: loop {
        let mut lease_client = client.lease_client();
        // Opening the stream sends one renewal and awaits its answer, but
        // hides that answer's raft term: renew again at once, and count
        // that one.
        let (mut keeper, mut stream) =
            match tokio::time::timeout(period, lease_client.keep_alive(id)).await {
                Ok(Ok(opened)) => opened,
                Ok(Err(etcd_client::Error::LeaseKeepAliveError(_))) => return, // not found
                _ => {
                    observe::renewal_failed("etcd", format_args!("lease {id:x}"));
                    tokio::time::sleep(retry).await;
                    continue;
                }
            };
        let mut pause = Duration::ZERO;
        loop {
            tokio::time::sleep(pause).await;
            pause = period;
            let sent = std::time::Instant::now();
            if keeper.keep_alive().await.is_err() {
                continue 'reconnect;
            }
            match tokio::time::timeout(period, stream.message()).await {
                Ok(Ok(Some(resp))) if resp.ttl() > 0 => {
                    let term = resp.header().map(|h| h.raft_term());
                    if counts(renewal, term).await {
                        let granted = Duration::from_secs(resp.ttl().unsigned_abs());
                        expiry.extend_to(sent + granted - margin);
                    } else {
                        // Not confirmed (a new leader, or no answer to the
                        // read): try again soon rather than a period later.
                        observe::renewal_failed("etcd", format_args!("lease {id:x}"));
                        pause = retry;
                    }
                }
                Ok(Ok(Some(_))) => return, // etcd: the lease has expired
                _ => {
                    observe::renewal_failed("etcd", format_args!("lease {id:x}"));
                    tokio::time::sleep(retry).await;
                    continue 'reconnect;
                }
            }
        }
    }
}

/// Whether a renewal answered in raft term `term` counts: a linearizable
/// read sent now is answered in that same term (see [`renew`]).
async fn counts(renewal: &Renewal, term: Option<u64>) -> bool {
    let Some(term) = term else {
        return false;
    };
    let mut kv = renewal.client.kv_client();
    // As long as a renewal's own answer may take, at most.
    let limit = renewal.timeout.min(renewal.ttl / 3);
    let read = request(
        "renewal check",
        limit,
        kv.get(
            renewal.check_key.clone(),
            Some(GetOptions::new().with_count_only()),
        ),
    )
    .await;
    same_term(
        term,
        read.ok().and_then(|r| r.header().map(|h| h.raft_term())),
    )
}

/// A renewal's term against the term of the read that followed it.
fn same_term(renewal: u64, read: Option<u64>) -> bool {
    read == Some(renewal)
}

#[cfg(test)]
mod tests {
    use super::same_term;

    #[test]
    fn a_renewal_counts_only_when_a_later_read_shares_its_term() {
        assert!(same_term(7, Some(7)));
        // A stalled old leader answered the renewal; the read met the new one.
        assert!(!same_term(7, Some(8)));
        // The read failed: nothing confirms the renewal.
        assert!(!same_term(7, None));
    }
}
