//! A leader's record in Redis: its proclaims (`PROCLAIM`, fenced with the
//! lock's token), the task that renews it every TTL/3 while the lock is
//! held and removes it once the lock is lost, and its retraction when the
//! leadership ends.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use async_trait::async_trait;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use super::protocol::{ElectionKeys, PROCLAIM, REFRESH, RETRACT, padded, record_tail};
use crate::redis::connect::failed_op::FailedOp;
use crate::redis::connect::node::{Admission, Reach};
use crate::redis::state::Core;
use crate::util::backoff::Backoff;
use crate::{Error, Key, LeaderRecord, Result};

/// What a leader's scripts need.
#[derive(Clone)]
struct Term {
    core: Arc<Core>,
    keys: ElectionKeys,
    /// The lock's token at the grant.
    token: u64,
}

impl Term {
    /// The error of a script that `op` sent and Redis did not run.
    fn failed(&self, op: &'static str, e: crate::redis::connect::node_error::NodeError) -> Error {
        Error::from(FailedOp {
            op,
            total: 1,
            quorum: 1,
            errors: vec![e],
        })
    }

    /// Runs `REFRESH`: `true` while this term leads.
    async fn refresh(&self) -> Result<bool> {
        let (token, term) = (self.token.to_string(), padded(self.token));
        let ttl = self.core.config.ttl_ms().to_string();
        let args = [
            token.as_bytes(),
            term.as_bytes(),
            ttl.as_bytes(),
            self.keys.channel.as_bytes(),
        ];
        let renewed: i64 = self
            .core
            .single_node()
            .run_bytes(
                &REFRESH,
                &self.keys.script_keys(),
                &args,
                (Reach::Replicas, Admission::Holder),
            )
            .await
            .map_err(|e| self.failed("renew the leader's record", e))?;
        Ok(renewed == 1)
    }

    /// Runs `RETRACT`, retried while Redis does not answer, for at most a
    /// TTL (the record's own, after which it is gone anyway).
    async fn remove(&self) -> Result<()> {
        let give_up = Instant::now() + self.core.config.ttl();
        let term = padded(self.token);
        let args = [term.as_bytes(), self.keys.channel.as_bytes()];
        let mut backoff = Backoff::new(std::time::Duration::from_millis(20), self.core.poll());
        loop {
            let sent: std::result::Result<i64, _> = self
                .core
                .single_node()
                .run_bytes(
                    &RETRACT,
                    &self.keys.script_keys(),
                    &args,
                    (Reach::Master, Admission::Holder),
                )
                .await;
            match sent {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() >= give_up || e.failure.is_refusal() => {
                    return Err(self.failed("remove the leader's record", e));
                }
                Err(_) => backoff.sleep().await,
            }
        }
    }
}

/// One leadership's record in Redis.
pub(crate) struct RedisRecord {
    name: Key,
    term: Term,
    /// Who leads, as the record shows it.
    owner: String,
    since: SystemTime,
    /// Renews the record, and removes it once the lock is seen lost;
    /// stopped by [`LeaderRecord::retract`] or drop.
    keeper: AbortHandle,
}

impl RedisRecord {
    /// The record of the leadership of `name` granted `token` (the lock's
    /// fencing token), written as `owner`, elected at `since`; `lost` is
    /// the lock's loss signal.
    pub fn new(
        core: Arc<Core>,
        keys: ElectionKeys,
        (name, token): (Key, u64),
        (owner, since): (String, SystemTime),
        lost: CancellationToken,
    ) -> Self {
        let term = Term { core, keys, token };
        let keeper = tokio::spawn(keep(term.clone(), lost)).abort_handle();
        RedisRecord {
            name,
            term,
            owner,
            since,
            keeper,
        }
    }
}

/// Renews the record every TTL/3 while the lock is this term's; once the
/// lock is lost, removes the record so that followers learn at once that
/// nobody leads. A renewal that fails is tried again at the next period:
/// the record outlives it by two periods.
async fn keep(term: Term, lost: CancellationToken) {
    let period = term.core.config.ttl() / 3;
    loop {
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            () = lost.cancelled() => break,
        }
        if matches!(term.refresh().await, Ok(false)) {
            return;
        }
    }
    let _ = term.remove().await;
}

impl Drop for RedisRecord {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

#[async_trait]
impl LeaderRecord for RedisRecord {
    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        let Term { core, keys, token } = &self.term;
        let (token_text, term) = (token.to_string(), padded(*token));
        let tail = record_tail(&self.owner, self.since, value);
        let ttl = core.config.ttl_ms().to_string();
        let args = [
            token_text.as_bytes(),
            term.as_bytes(),
            &tail,
            ttl.as_bytes(),
            keys.channel.as_bytes(),
        ];
        let written: i64 = core
            .single_node()
            .run_bytes(
                &PROCLAIM,
                &keys.script_keys(),
                &args,
                (Reach::Replicas, Admission::Holder),
            )
            .await
            .map_err(|e| self.term.failed("proclaim", e))?;
        if written == 1 {
            return Ok(());
        }
        Err(Error::LockLost {
            key: self.name.to_string(),
            reason: "not the leader any more: the election's lock expired or was taken over \
                     (was this process paused, or Redis unreachable, for longer than the TTL?); \
                     nothing was written"
                .into(),
        })
    }

    async fn retract(self: Box<Self>) -> Result<()> {
        self.keeper.abort();
        self.term.remove().await
    }
}
