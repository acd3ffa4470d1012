//! A leader's record in etcd: the value key its proclaims write (fenced
//! with its term) and its retraction when the leadership ends (txns:
//! `protocol/election.rs`).

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use async_trait::async_trait;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use crate::etcd::client::error::EtcdResult;
use crate::etcd::client::retry::{Budget, Retrying};
use crate::etcd::lock::held_lock::HeldLock;
use crate::etcd::protocol::election::{encode, proclaim, retract};
use crate::etcd::protocol::keys::LockKeys;
use crate::etcd::session::handout::Lease;
use crate::etcd::session::state::LockerState;
use crate::{Error, Key, LeaderRecord, Result};

/// What a leader's writes of the value key need.
#[derive(Clone)]
struct Term {
    state: Arc<LockerState>,
    keys: LockKeys,
    /// The leader's term: its lock's fencing token.
    term: i64,
    /// The lease its lock key is bound to; the value key goes on it too.
    lease: Arc<Lease>,
}

/// One leadership's record in etcd.
pub(crate) struct EtcdRecord {
    name: Key,
    term: Term,
    /// Who leads, as the record shows it (`e<uuid> pid=.. host=.. at=..`).
    owner: String,
    since: SystemTime,
    /// Removes the record once the lock is seen lost; stopped by
    /// [`LeaderRecord::retract`] or drop.
    on_loss: AbortHandle,
}

impl EtcdRecord {
    /// The record of the leadership holding `held` (the election `name`'s
    /// lock), written as `owner`, elected at `since`. Once `lost` is
    /// cancelled (the lock's loss signal), it removes itself: followers
    /// then learn that nobody leads without waiting for the lease.
    pub fn new(
        held: &HeldLock,
        name: Key,
        (owner, since): (String, SystemTime),
        lost: CancellationToken,
    ) -> Self {
        let term = Term {
            state: Arc::clone(&held.state),
            keys: held.keys.clone(),
            term: held.token,
            lease: Arc::clone(&held.lease),
        };
        let on_loss = {
            let term = term.clone();
            tokio::spawn(async move {
                lost.cancelled().await;
                let _ = remove(&term).await;
            })
            .abort_handle()
        };
        EtcdRecord {
            name,
            term,
            owner,
            since,
            on_loss,
        }
    }
}

impl Drop for EtcdRecord {
    fn drop(&mut self) {
        self.on_loss.abort();
    }
}

#[async_trait]
impl LeaderRecord for EtcdRecord {
    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        let Term {
            state,
            keys,
            term,
            lease,
        } = &self.term;
        let record = encode(*term, &self.owner, self.since, value);
        let resp = state
            .txn("proclaim", proclaim(keys, *term, lease.id, &record))
            .await?;
        if resp.succeeded() {
            return Ok(());
        }
        Err(Error::LockLost {
            key: self.name.to_string(),
            reason: "not the leader any more: the election's lock key was deleted or taken over (did the session \
                     lease expire?); nothing was written"
                .into(),
        })
    }

    async fn retract(self: Box<Self>) -> Result<()> {
        self.on_loss.abort();
        Ok(remove(&self.term).await?)
    }
}

/// Deletes the value key if it still holds a record of this term, retried
/// while etcd does not answer, for at most the lease's TTL (after which a
/// lease that etcd did not hear from is gone, and the record with it), or
/// until the lease is known gone.
async fn remove(t: &Term) -> EtcdResult<()> {
    let mut retrying = Retrying::new(Budget::Until(Instant::now() + t.state.config.ttl()));
    loop {
        match t.state.txn("retract", retract(&t.keys, t.term)).await {
            Ok(_) => return Ok(()),
            Err(_) if t.lease.gone_in_etcd() => return Ok(()),
            Err(e) => retrying.again(e).await?,
        }
    }
}
