//! A held read lock, write lock or permit on Redis: the watchdog that
//! extends its entry every TTL/3 and declares it lost when it cannot, and
//! the release behind `LockGuard::unlock`. Read/write locks and
//! semaphores run on one node (never Redlock), so there is no quorum here.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use crate::api::loss::LossCell;
use crate::redis::connect::node::{Call, Reach};
use crate::redis::protocol::line::{Left, LineKeys};
use crate::redis::protocol::line_lua::{EXTEND_SCRIPT, LEAVE_SCRIPT};
use crate::redis::state::Core;
use crate::util::backoff::{Backoff, jitter};
use crate::util::observe;
use crate::{Error, Expiry, GuardRelease, Key, LockGuard, LossCause, Result};

/// Builds the guard of entry `id`, granted `token` by a request sent at
/// `started`, and starts its watchdog. Its local deadline counts from
/// `started`, as the mutex's does (see `held_lock.rs`).
pub(crate) fn guard(
    core: Arc<Core>,
    key: Key,
    keys: LineKeys,
    id: String,
    token: u64,
    started: Instant,
) -> LockGuard {
    let config = &core.config;
    let expiry = Expiry::new(started + config.ttl() - config.drift() - config.margin());
    let lost = CancellationToken::new();
    let loss = LossCell::default();
    let task = tokio::spawn(watch(
        Arc::clone(&core),
        (keys.clone(), id.clone()),
        started,
        (lost.clone(), expiry.clone(), loss.clone()),
    ));
    let held = HeldEntry {
        core,
        key: key.clone(),
        keys,
        id,
        expiry: expiry.clone(),
        lost: lost.clone(),
        loss,
        watchdog: task.abort_handle(),
    };
    LockGuard::new(key, token, Box::new(held)).with_loss_signal(lost, Some(expiry))
}

/// Extends the entry every TTL/3; ends, cancelling `lost`, when Redis says
/// the entry is gone (expired, deleted) or the deadline passes without an
/// acknowledged extend (Redis unreachable, or this process paused).
async fn watch(
    core: Arc<Core>,
    (keys, id): (LineKeys, String),
    started: Instant,
    (lost, expiry, loss): (CancellationToken, Expiry, LossCell),
) {
    let (cause, why) = tokio::select! {
        () = extend_loop(&core, &keys, &id, started, &expiry) => {
            (LossCause::KeyChanged, "its entry in the line is gone")
        }
        () = expiry.passed() => (LossCause::Expired, "no extend acknowledged in time"),
    };
    observe::loss_cause("redis", format_args!("line {}", keys.line), why);
    loss.record(cause);
    lost.cancel();
    expiry.expire();
}

async fn extend_loop(core: &Core, keys: &LineKeys, id: &str, started: Instant, expiry: &Expiry) {
    let config = &core.config;
    let ttl = config.ttl();
    let period = ttl / 3;
    let script_keys = keys.script_keys();
    let mut next = started + period;
    loop {
        tokio::time::sleep_until(next.into()).await;
        let sent = Instant::now();
        let answer = core
            .single_node()
            .run::<i64>(Call {
                script: &EXTEND_SCRIPT,
                keys: &script_keys,
                args: vec![
                    id.to_owned(),
                    keys.entries.clone(),
                    config.ttl_ms().to_string(),
                ],
                reach: Reach::Replicas,
            })
            .await;
        match answer {
            Ok(1) if config.validity_left(sent.elapsed()).is_some() => {
                expiry.extend_to(sent + ttl - config.drift() - config.margin());
                next = sent + period;
            }
            Ok(0) => return,
            _ => {
                // No answer (or too late): try again soon, until the deadline.
                observe::renewal_failed(
                    "redis",
                    format_args!("line {}", keys.line),
                    &"the extend of its entry was not acknowledged in time",
                );
                let (first, _) = config.retry_delay();
                next = Instant::now() + (first * 2 + jitter(first)).min(period);
            }
        }
    }
}

/// A held entry of a line: what a guard releases.
struct HeldEntry {
    core: Arc<Core>,
    key: Key,
    keys: LineKeys,
    id: String,
    expiry: Expiry,
    lost: CancellationToken,
    loss: LossCell,
    watchdog: AbortHandle,
}

impl Drop for HeldEntry {
    fn drop(&mut self) {
        self.watchdog.abort();
    }
}

impl HeldEntry {
    fn lost_error(&self, reason: &str) -> Error {
        Error::LockLost {
            key: self.key.to_string(),
            reason: reason.to_owned(),
        }
    }
}

#[async_trait]
impl GuardRelease for HeldEntry {
    /// Leaves the line (granting whom that admits); retries while Redis
    /// does not answer, until the entry would have expired anyway. An
    /// entry found gone after an unanswered leave, before the local
    /// deadline, was removed by that leave: released, not lost.
    async fn release(self: Box<Self>) -> Result<()> {
        self.watchdog.abort();
        let was_lost = self.lost.is_cancelled() || self.expiry.has_passed();
        let script_keys = self.keys.script_keys();
        let (first, max) = self.core.config.retry_delay();
        let mut backoff = Backoff::new(first, max).with_jitter();
        let give_up = Instant::now() + self.core.config.ttl();
        let mut unanswered = false;
        let left = loop {
            let answer = self
                .core
                .single_node()
                .run::<i64>(Call {
                    script: &LEAVE_SCRIPT,
                    keys: &script_keys,
                    args: vec![
                        self.id.clone(),
                        self.keys.entries.clone(),
                        self.keys.lock.wake.clone(),
                    ],
                    reach: Reach::Master,
                })
                .await;
            match answer {
                Ok(answer) => break Left::from_answer(answer),
                Err(e) if Instant::now() >= give_up => {
                    return Err(self.core.nodes.unavailable("unlock", vec![e]));
                }
                Err(_) => {
                    unanswered = true;
                    backoff.sleep().await;
                }
            }
        };
        if was_lost {
            return Err(self.lost_error(
                "its TTL passed without an acknowledged extend (Redis unreachable, or this \
                 process paused) before unlock",
            ));
        }
        match left {
            Left::Held => Ok(()),
            Left::Gone if unanswered && !self.expiry.has_passed() => Ok(()),
            Left::Gone | Left::Waited => {
                Err(self.lost_error("its entry had expired or was deleted at unlock"))
            }
        }
    }

    fn loss_cause(&self) -> Option<LossCause> {
        self.loss.get()
    }
}
