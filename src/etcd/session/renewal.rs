//! Renewing one session lease: the keepalive task, which moves the lease's
//! local deadline only on renewals a linearizable read confirms, and ends
//! the lease when etcd says it is gone or the deadline passes.

use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::{Client, GetOptions, GetResponse};
use tokio::sync::watch;

use super::lease::LeaseState;
use crate::etcd::client::error::{EtcdError, EtcdResult};
use crate::etcd::client::request::{hedged, request};
use crate::etcd::client::secure::token_refused;
use crate::util::observe;
use crate::{Expiry, LossCause};

/// What the keepalive task needs to renew one lease.
pub(crate) struct Renewal {
    pub client: Client,
    pub id: i64,
    pub ttl: Duration,
    /// How much earlier than etcd the local deadline ends.
    pub margin: Duration,
    /// A key the locker may read: the read that confirms a renewal.
    pub check_key: Vec<u8>,
    pub timeout: Duration,
}

/// How [`renew`] ended.
enum Ended {
    /// etcd said the lease does not exist.
    Gone,
    /// The read confirming the lease's first renewal was refused.
    Refused(EtcdError),
}

/// Keeps the lease alive until it is lost: etcd says it expired, the local
/// deadline passes without a renewal that counts (etcd unreachable, or
/// this process paused), or no renewal of a fresh lease can count because
/// its confirming read is refused. Then `lost` is cancelled and the
/// deadline ends, so no guard reports the lock held any longer.
pub(crate) async fn keep_alive(renewal: Renewal, signals: LeaseState) {
    let id = renewal.id;
    // A lease never confirmed was never handed out: no lock was lost.
    let confirmed = || *signals.renewed.borrow() > 0;
    tokio::select! {
        ended = renew(&renewal, &signals.expiry, &signals.renewed) => match ended {
            Ended::Gone => {
                signals.gone.store(true, Ordering::Release);
                signals.loss.record(LossCause::LeaseEnded);
                if confirmed() {
                    observe::loss_cause("etcd", format_args!("lease {id:x}"), "etcd says the lease is gone");
                }
            }
            Ended::Refused(err) => {
                if let Ok(mut slot) = signals.refused.lock() {
                    *slot = Some(err);
                }
            }
        },
        () = signals.expiry.passed() => {
            signals.loss.record(LossCause::Expired);
            if confirmed() {
                observe::loss_cause("etcd", format_args!("lease {id:x}"), "no renewal acknowledged in time");
            }
        }
        () = signals.lost.cancelled() => {}
    }
    signals.lost.cancel();
    signals.expiry.expire();
}

/// Renews the lease every TTL/3, moving `expiry` on each renewal that
/// counts (see [`counts`]) and adding it to `renewed`; returns when etcd
/// says the lease is gone, or when the read that would confirm the first
/// renewal is refused.
///
/// etcd 3.4 before 3.4.25 and 3.5 before 3.5.8 let a leader that was
/// stalled (paused, or stuck on a slow disk) answer renewals after the
/// rest of the cluster elected a new one: the new leader never saw them,
/// so the lease expires there while this client believes it renewed.
/// A renewal therefore counts only when a linearizable read sent after its
/// answer is answered in the same raft term: a read confirms that the
/// term's leader still had a quorum, and a new leader extends every lease
/// by the TTL when it takes over.
async fn renew(renewal: &Renewal, expiry: &Expiry, renewed: &watch::Sender<u64>) -> Ended {
    let Renewal {
        client,
        id,
        ttl,
        margin,
        ..
    } = renewal;
    let (id, ttl, margin) = (*id, *ttl, *margin);
    let period = ttl / 3;
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
                Ok(Err(etcd_client::Error::LeaseKeepAliveError(_))) => return Ended::Gone,
                failed => {
                    let why = match failed {
                        Ok(Err(e)) => format!("opening the keepalive stream failed: {e}"),
                        _ => {
                            format!("opening the keepalive stream got no answer within {period:?}")
                        }
                    };
                    observe::renewal_failed("etcd", format_args!("lease {id:x}"), &why);
                    tokio::time::sleep(retry).await;
                    continue;
                }
            };
        let mut next = tokio::time::Instant::now();
        loop {
            tokio::time::sleep_until(next).await;
            let sent = std::time::Instant::now();
            // A period after this one was sent, not after it was answered
            // and confirmed: when etcd answers slowly (a loaded server, or
            // this client's own burst of requests ahead of the renewal),
            // waiting a whole period after a slow round would space
            // renewals by the period plus two round trips, past the TTL.
            next = tokio::time::Instant::from_std(sent) + period;
            if keeper.keep_alive().await.is_err() {
                continue 'reconnect;
            }
            match tokio::time::timeout(period, stream.message()).await {
                Ok(Ok(Some(resp))) if resp.ttl() > 0 => {
                    let term = resp.header().map(|h| h.raft_term());
                    match counts(renewal, term).await {
                        Ok(true) => {
                            let granted = Duration::from_secs(resp.ttl().unsigned_abs());
                            expiry.extend_to(sent + granted - margin);
                            renewed.send_modify(|n| *n += 1);
                        }
                        Err(refused) if *renewed.borrow() == 0 => return Ended::Refused(refused),
                        _ => {
                            // Not confirmed (a new leader, or no answer to
                            // the read): try again soon rather than a
                            // period later.
                            observe::renewal_failed(
                                "etcd",
                                format_args!("lease {id:x}"),
                                &"no read confirmed it (answered in another raft term, or not at all)",
                            );
                            next = tokio::time::Instant::now() + retry;
                        }
                    }
                }
                Ok(Ok(Some(_))) => return Ended::Gone, // etcd: the lease has expired
                failed => {
                    if let Ok(Err(e)) = &failed
                        && token_refused(e)
                    {
                        // Refused mid-stream, where etcd-client does not
                        // authenticate again by itself (see `client/stale_token.rs`):
                        // the next stream goes with a new token.
                        let _ = client.refresh_token().await;
                    }
                    let why = match failed {
                        Ok(Err(e)) => format!("the keepalive stream failed: {e}"),
                        Ok(Ok(None)) => "etcd closed the keepalive stream".to_string(),
                        _ => format!("no answer within {period:?}"),
                    };
                    observe::renewal_failed("etcd", format_args!("lease {id:x}"), &why);
                    tokio::time::sleep(retry).await;
                    continue 'reconnect;
                }
            }
        }
    }
}

/// Whether a renewal answered in raft term `term` counts: a linearizable
/// read sent now is answered in that same term (see [`renew`]). The read's
/// error when etcd refused it (see [`EtcdError::is_refusal`]).
async fn counts(renewal: &Renewal, term: Option<u64>) -> Result<bool, EtcdError> {
    let Some(term) = term else {
        return Ok(false);
    };
    match confirming_read(renewal).await {
        Err(e) if e.is_refusal() => Err(e),
        read => Ok(same_term(
            term,
            read.ok().and_then(|r| r.header().map(|h| h.raft_term())),
        )),
    }
}

/// The read that confirms a renewal, [hedged](hedged): the client sends
/// each request to a member picked at random, and one that went to a member
/// cut off from the others (a connection that looks alive) waits out its
/// whole limit, often longer than the lease has left. A second read is sent
/// when the first has not answered within a third of the limit; the first
/// answer counts, and a refusal ends it at once.
async fn confirming_read(renewal: &Renewal) -> EtcdResult<GetResponse> {
    // As long as a renewal's own answer may take, at most.
    let limit = renewal.timeout.min(renewal.ttl / 3);
    hedged(limit / 3, || {
        let mut kv = renewal.client.kv_client();
        let key = renewal.check_key.clone();
        async move {
            request(
                "renewal check",
                limit,
                kv.get(key, Some(GetOptions::new().with_count_only())),
            )
            .await
        }
    })
    .await
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
