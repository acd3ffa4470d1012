//! One call to `lock` or `try_lock` in etcd's layout: its key, the writes
//! it sends, and what giving up (an error, a cancel, a drop) takes back,
//! so that a call leaves nothing behind. (etcd's own recipes leave their
//! key behind when a call is cancelled mid-write: etcd issues 21128 and
//! 22123.)

use std::future::Future;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::held::HeldContender;
use super::leases::ContenderLease;
use crate::etcd::client::error::{EtcdError, EtcdResult};
use crate::etcd::client::in_doubt::InDoubt;
use crate::etcd::client::request::Answer;
use crate::etcd::client::request::retry_backoff;
use crate::etcd::protocol::etcd_layout::{self, Enqueued, NameKeys, Tried};
use crate::etcd::protocol::keys::owner_value;
use crate::etcd::session::handout::{Lease, LeaseEnd};
use crate::etcd::session::state::{LockerState, Outgoing};
use crate::semantics::armed::{Armed, TakeBack};
use crate::{Error, Key, LockGuard};

/// One call on a name in etcd's layout.
pub(crate) struct Contender {
    pub state: Arc<LockerState>,
    pub key: Key,
    pub names: NameKeys,
    /// Our key: `N/<lease hex>`.
    pub own: Vec<u8>,
    pub lease: Arc<Lease>,
    /// Ends with the call, or goes to the guard.
    leased: Option<ContenderLease>,
    /// Our key's create revision, once known.
    rev: Option<i64>,
    /// Its write on its way, and whether one may land unseen: if the
    /// caller gives up meanwhile, the cleanup waits for it first.
    in_doubt: InDoubt,
    /// A write was sent: our key may be in etcd.
    sent: bool,
}

impl Contender {
    /// A call on `key`, on the lease it gets (see `leases.rs`).
    ///
    /// Errors: the lease's.
    pub async fn new(state: &Arc<LockerState>, key: &Key) -> EtcdResult<Armed<Self>> {
        let names = NameKeys::new(state.config.prefix(), key.as_str());
        let leased = ContenderLease::take(state, &names).await?;
        let lease = Arc::clone(&leased.lease);
        Ok(Armed::new(Contender {
            state: Arc::clone(state),
            key: key.clone(),
            own: names.contender(lease.id),
            names,
            lease,
            leased: Some(leased),
            rev: None,
            in_doubt: InDoubt::default(),
            sent: false,
        }))
    }

    /// `true` if the lease is presumed lost here (not renewed for a TTL)
    /// rather than gone in etcd: the call held nothing, and may queue
    /// again on a fresh lease.
    pub fn lease_presumed_lost(&self) -> bool {
        self.lease.lost.is_cancelled() && !self.lease.gone_in_etcd()
    }

    /// Writes our key, with `value` (fairlock's owner value for a lock,
    /// the proposal for a campaign), behind every contender on the name
    /// (`enqueue` in the spec): its create revision, and how many contenders were ahead
    /// of it when the answer tells.
    ///
    /// Errors: [`Error::InvalidKey`] when the name is held in fairlock's
    /// own layout; the request's.
    pub async fn enqueue(&mut self, value: &[u8]) -> EtcdResult<(i64, Option<i64>)> {
        loop {
            let txn = etcd_layout::enqueue(&self.names, &self.own, value, self.lease.id);
            let answer = self.write("enqueue", txn).await?;
            match etcd_layout::read_enqueue(&answer, answer.revision) {
                Enqueued::Queued { rev, ahead } => {
                    self.rev = Some(rev);
                    return Ok((rev, ahead));
                }
                Enqueued::OtherLayout => return Err(self.other_layout()),
                Enqueued::Again => {}
            }
        }
    }

    /// Takes the name if nobody contends (`try_lock` in the spec): our
    /// key's create revision, or `None` when someone contends (nothing
    /// was written).
    ///
    /// Errors: as [`Contender::enqueue`].
    pub async fn try_take(&mut self) -> EtcdResult<Option<i64>> {
        let value = owner_value(self.state.fairness);
        let txn = etcd_layout::try_take(&self.names, &self.own, &value, self.lease.id);
        let answer = self.write("try_lock", txn).await?;
        match etcd_layout::read_try(&answer) {
            Tried::Taken => {
                self.rev = Some(answer.revision);
                Ok(Some(answer.revision))
            }
            Tried::Busy => Ok(None),
            Tried::OtherLayout => Err(self.other_layout()),
        }
    }

    fn other_layout(&self) -> EtcdError {
        EtcdError::Public(Error::InvalidKey {
            key: self.key.to_string(),
            reason: "it is held in fairlock's own layout, which does not exclude etcd's: \
                     every process on one name must use the same layout (see the README, \
                     migrating a fleet)"
                .into(),
        })
    }

    /// Sends `txn`, alone. If the caller gives up before the answer, the
    /// write stays for the cleanup, which waits for it: our key cannot
    /// appear after the cleanup.
    async fn write(&mut self, op: &'static str, txn: impl Into<Outgoing>) -> EtcdResult<Answer> {
        let (state, txn) = (Arc::clone(&self.state), txn.into());
        self.sent = true;
        let result = self
            .in_doubt
            .send(async move { state.txn(op, txn).await })
            .await;
        match result {
            Err(e) => Err(self.state.lease_error(&self.key, &self.lease, e).await),
            ok => ok,
        }
    }
}

impl Armed<Contender> {
    /// The guard of the lock granted to our key, created at `rev`.
    pub fn granted(mut self, rev: i64) -> LockGuard {
        self.set_armed(false);
        let lease = Arc::clone(&self.lease);
        let own_lease = self.leased.as_ref().is_some_and(ContenderLease::is_own);
        let (lost, forward) = match own_lease {
            false => (lease.lost.child_token(), None),
            // A lease of the call's own is revoked by the release itself,
            // which must not read as a loss: the guard hears of the
            // lease's end only while it holds.
            true => {
                let (lost, of_lease) = (CancellationToken::new(), lease.lost.clone());
                let forward = {
                    let lost = lost.clone();
                    tokio::spawn(async move {
                        of_lease.cancelled().await;
                        lost.cancel();
                    })
                };
                (lost, Some(forward.abort_handle()))
            }
        };
        let expiry = lease.expiry.clone();
        let mut held = HeldContender::new(
            Arc::clone(&self.state),
            self.key.clone(),
            (self.own.clone(), rev),
            lease,
            self.leased.take(),
        );
        held.forward = forward;
        let token = u64::try_from(rev).unwrap_or_default();
        LockGuard::new(self.key.clone(), token, Box::new(held)).with_loss_signal(lost, Some(expiry))
    }

    /// Ends a call that wrote nothing (its answer said so).
    pub fn wrote_nothing(mut self) {
        self.set_armed(false);
        if let Some(leased) = self.leased.take() {
            leased.done(!self.in_doubt.unanswered);
        }
    }
}

impl TakeBack for Contender {
    /// Deletes our key, by its create revision when known, else by our
    /// lease (a key under the name on our lease is ours), after the write
    /// still on its way ends.
    fn take_back(&mut self) -> impl Future<Output = ()> + Send + 'static {
        let state = Arc::clone(&self.state);
        let (own, lease, leased) = (
            self.own.clone(),
            Arc::clone(&self.lease),
            self.leased.take(),
        );
        let inflight = self.in_doubt.take();
        let (mut rev, sent, mut unanswered) = (self.rev, self.sent, self.in_doubt.unanswered);
        async move {
            if let Some(write) = inflight {
                match write.await {
                    Ok(answer) => rev = rev.or_else(|| created(&answer)),
                    Err(e) => unanswered |= e.is_transient(),
                }
            }
            let Some(leased) = leased else {
                return;
            };
            if !sent {
                leased.done(true);
                return;
            }
            if unanswered {
                // etcd may still apply the write after this cleanup
                // (requests on one connection are not applied in send
                // order): stop renewing the lease, so that whatever it may
                // still create expires within the TTL.
                state.session.forget(lease.id, LeaseEnd::Distrusted).await;
            }
            let deleted = give_up(&state, &own, rev, &lease).await;
            leased.done(deleted && !unanswered);
        }
    }
}

/// Our key's create revision in the answer to our enqueue or `try_lock`:
/// the txn's revision when it wrote the key, the key read else.
fn created(answer: &Answer) -> Option<i64> {
    match etcd_layout::read_enqueue(answer, answer.revision) {
        Enqueued::Queued { rev, .. } => Some(rev),
        Enqueued::OtherLayout | Enqueued::Again => None,
    }
}

/// Deletes `own` (see [`TakeBack::take_back`]); `true` once etcd answered,
/// `false` when the lease was lost first (the key expires with it).
async fn give_up(state: &LockerState, own: &[u8], rev: Option<i64>, lease: &Lease) -> bool {
    let mut backoff = retry_backoff();
    loop {
        let txn = match rev {
            Some(rev) => etcd_layout::release(own, rev),
            None => etcd_layout::give_up_unanswered(own, lease.id),
        };
        match state.txn("give up", txn).await {
            Ok(_) => return true,
            Err(_) if lease.lost.is_cancelled() => return false,
            Err(_) => lease.pause(&mut backoff).await,
        }
    }
}
