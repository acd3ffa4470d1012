//! A held lock: the watchdog that extends it every TTL/3 and declares it
//! lost when it cannot, and the release behind `LockGuard::unlock`.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::api::loss::LossCell;
use crate::redis::connect::node::{Call, Reach};
use crate::redis::lock::deferred::Watchdog;
use crate::redis::protocol::keys::LockKeys;
use crate::redis::protocol::lock_args::release_args;
use crate::redis::protocol::lock_lua::{EXTEND_SCRIPT, RELEASE_SCRIPT, Released};
use crate::redis::state::Core;
use crate::util::backoff::{Backoff, jitter};
use crate::util::observe;
use crate::{Error, Expiry, GuardRelease, Key, LockGuard, LossCause, Result};

/// Builds the guard of a grant whose acquire request was sent at
/// `started`, given on the nodes of `granted` with their own tokens, and
/// queues its watchdog, which starts when its first extend is due (see
/// `deferred.rs`). The local deadline (see
/// [`RedisConfig::validity_left`](crate::redis::config::redis_config::RedisConfig)) and the
/// first extend both count from `started`.
pub(crate) fn guard(
    core: Arc<Core>,
    key: Key,
    keys: LockKeys,
    owner: String,
    token: u64,
    started: Instant,
    granted: &[(usize, u64)],
) -> LockGuard {
    let config = &core.config;
    let deadline = started + config.ttl() - config.drift() - config.margin();
    let lost = CancellationToken::new();
    let expiry = Expiry::new(deadline);
    let loss = LossCell::default();
    let mut tokens = vec![String::new(); core.nodes.list.len()];
    for (i, t) in granted {
        tokens[*i] = t.to_string();
    }
    let watchdog = core.watchdogs.start(
        started + config.ttl() / 3,
        Box::pin(watch(
            Arc::clone(&core),
            keys.clone(),
            owner.clone(),
            started,
            lost.clone(),
            expiry.clone(),
            loss.clone(),
        )),
    );
    let held_lock = HeldLock {
        core,
        key: key.clone(),
        keys,
        owner,
        tokens,
        expiry: expiry.clone(),
        lost: lost.clone(),
        loss,
        watchdog,
    };
    LockGuard::new(key, token, Box::new(held_lock)).with_loss_signal(lost, Some(expiry))
}

/// Extends the lock every TTL/3 on every node; a quorum of extends moves
/// the deadline to send time + TTL - drift - margin. Ends, cancelling
/// `lost`, when the nodes say the lock is someone else's (or gone), or the
/// deadline passes without a quorum of extends (nodes unreachable, or this
/// process paused).
async fn watch(
    core: Arc<Core>,
    keys: LockKeys,
    owner: String,
    started: Instant,
    lost: CancellationToken,
    expiry: Expiry,
    loss: LossCell,
) {
    let (cause, why) = tokio::select! {
        () = extend_loop(&core, &keys, &owner, started, &expiry) => {
            (LossCause::KeyChanged, "a majority of nodes say the lock is not ours")
        }
        () = expiry.passed() => (LossCause::Expired, "no extend acknowledged in time"),
    };
    observe::loss_cause("redis", format_args!("lock {}", keys.lock), why);
    loss.record(cause);
    lost.cancel();
    expiry.expire();
}

async fn extend_loop(core: &Core, keys: &LockKeys, owner: &str, started: Instant, expiry: &Expiry) {
    let config = &core.config;
    let nodes = &core.nodes;
    let ttl = config.ttl();
    let period = ttl / 3;
    let script_keys = keys.script_keys();
    let ttl_ms = config.ttl_ms().to_string();
    // The first extend is due a period after the acquire was sent (the
    // grant's deadline counts from then), not after the guard was built.
    let mut next = started + period;
    loop {
        tokio::time::sleep_until(next.into()).await;
        let sent = Instant::now();
        let results = nodes
            .all::<i64, _>(|_, _| Call {
                script: &EXTEND_SCRIPT,
                keys: &script_keys,
                args: vec![owner.to_owned(), ttl_ms.clone()],
                reach: Reach::Replicas,
            })
            .await;
        let extended = results.iter().filter(|r| matches!(r, Ok(1))).count();
        let refused = results.iter().filter(|r| matches!(r, Ok(0))).count();
        if extended >= nodes.quorum && config.validity_left(sent.elapsed()).is_some() {
            expiry.extend_to(sent + ttl - config.drift() - config.margin());
            next = sent + period;
        } else if refused > nodes.list.len() - nodes.quorum {
            return; // held by nobody or someone else on a majority: lost
        } else {
            // Nodes did not answer: try again soon, until the deadline.
            observe::renewal_failed(
                "redis",
                format_args!("lock {}", keys.lock),
                &format_args!(
                    "{extended} of {} nodes extended it; {} are needed",
                    nodes.list.len(),
                    nodes.quorum
                ),
            );
            let (first, _) = config.retry_delay();
            next = Instant::now() + (first * 2 + jitter(first)).min(period);
        }
    }
}

/// A held Redis lock: what a guard releases.
struct HeldLock {
    core: Arc<Core>,
    key: Key,
    keys: LockKeys,
    owner: String,
    /// The token each node gave (empty where none was given).
    tokens: Vec<String>,
    expiry: Expiry,
    lost: CancellationToken,
    /// Why the watchdog declared the lock lost.
    loss: LossCell,
    watchdog: Watchdog,
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        self.watchdog.stop();
    }
}

impl HeldLock {
    fn lost_error(&self, reason: &str) -> Error {
        Error::LockLost {
            key: self.key.to_string(),
            reason: reason.to_string(),
        }
    }
}

#[async_trait]
impl GuardRelease for HeldLock {
    /// Deletes the lock key where this guard still holds it and passes the
    /// lock on; retries nodes that do not answer until the lock would have
    /// expired anyway.
    ///
    /// A node whose earlier release got no answer (it timed out, yet Redis
    /// may have applied it) and that later says the key is gone, or held by
    /// a later grant (a greater token than this node gave us), counts as
    /// released, if that answer came before the guard's local deadline: the
    /// key could not have expired by then, so it was our own release that
    /// removed it. Past the deadline it counts as lost, as does a key that
    /// holds anything else: someone overwrote it before our release came.
    async fn release(self: Box<Self>) -> Result<()> {
        // Stop extending first: our own release is not a loss.
        self.watchdog.stop();
        let was_lost = self.lost.is_cancelled() || self.expiry.has_passed();
        let nodes = &self.core.nodes;
        let script_keys = self.keys.script_keys();
        let (first, max) = self.core.config.retry_delay();
        let mut backoff = Backoff::new(first, max).with_jitter();
        // Past this the key has expired on every node that did not answer.
        let give_up = Instant::now() + self.core.config.ttl();
        let mut released = 0;
        let mut pending: Vec<usize> = (0..nodes.list.len()).collect();
        // Nodes sent a release that got no answer.
        let mut unanswered = vec![false; nodes.list.len()];
        loop {
            let results = nodes
                .some::<i64>(&pending, |i| Call {
                    script: &RELEASE_SCRIPT,
                    keys: &script_keys,
                    args: release_args(&self.owner, &self.keys, &self.tokens[i]),
                    reach: Reach::Master,
                })
                .await;
            let mut still = Vec::new();
            let mut errors = Vec::new();
            for (i, r) in pending.iter().zip(results) {
                match r.map(Released::from_answer) {
                    Ok(Released::Ours) => released += 1,
                    Ok(Released::Gone | Released::LaterGrant)
                        if unanswered[*i] && !self.expiry.has_passed() =>
                    {
                        released += 1;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        unanswered[*i] = true;
                        still.push(*i);
                        errors.push(e);
                    }
                }
            }
            pending = still;
            let answered = nodes.list.len() - pending.len();
            if pending.is_empty() || (answered >= nodes.quorum && released >= nodes.quorum) {
                break;
            }
            if Instant::now() >= give_up {
                return Err(nodes.unavailable("unlock", errors));
            }
            backoff.sleep().await;
        }
        // Nodes that did not answer (a quorum did) keep the key until it
        // expires: it no longer counts, as a quorum is free.
        if was_lost {
            return Err(self.lost_error(
                "its TTL passed without an acknowledged extend (Redis unreachable, or \
                 this process paused) before unlock",
            ));
        }
        if released < nodes.quorum {
            return Err(
                self.lost_error("the lock key had expired or belonged to another holder at unlock")
            );
        }
        Ok(())
    }
    fn loss_cause(&self) -> Option<LossCause> {
        self.loss.get()
    }
}
