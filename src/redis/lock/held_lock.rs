//! A held lock: how it is extended (the renewal loop that declares it
//! lost when it cannot is `semantics/renew.rs`, started by the deferred
//! watchdog of `deferred.rs`), and the release behind `LockGuard::unlock`.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use crate::redis::connect::node::{Call, Reach};
use crate::redis::lock::deferred::Watchdog;
use crate::redis::protocol::keys::LockKeys;
use crate::redis::protocol::lock_args::release_args;
use crate::redis::protocol::lock_lua::{EXTEND_SCRIPT, RELEASE_SCRIPT, Released};
use crate::redis::state::Core;
use crate::semantics::renew::{Extended, LossSignal, Renew, renew};
use crate::util::backoff::Backoff;
use crate::{Error, GuardRelease, Key, LockGuard, LossCause, Result};

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
    let timing = core.renewal();
    let signal = LossSignal::until(started + timing.trusted);
    let mut tokens = vec![String::new(); core.nodes.list.len()];
    for (i, t) in granted {
        tokens[*i] = t.to_string();
    }
    let lock = LockRenew {
        core: Arc::clone(&core),
        keys: keys.clone(),
        owner: owner.clone(),
    };
    let watchdog = core.watchdogs.start(
        started + timing.period,
        Box::pin(renew(lock, timing, started, signal.clone())),
    );
    let held_lock = HeldLock {
        core,
        key: key.clone(),
        keys,
        owner,
        tokens,
        signal: signal.clone(),
        watchdog,
    };
    signal.guard(key, token, Box::new(held_lock))
}

/// How a lock is extended: on every node, a quorum needed.
struct LockRenew {
    core: Arc<Core>,
    keys: LockKeys,
    owner: String,
}

impl Renew for LockRenew {
    const BACKEND: &'static str = "redis";
    const GONE: &'static str = "a majority of nodes say the lock is not ours";

    async fn extend(&self) -> Extended {
        let nodes = &self.core.nodes;
        let ttl_ms = self.core.config.ttl_ms().to_string();
        let script_keys = self.keys.script_keys();
        let results = nodes
            .all::<i64, _>(|_, _| Call {
                script: &EXTEND_SCRIPT,
                keys: &script_keys,
                args: vec![self.owner.clone(), ttl_ms.clone()],
                reach: Reach::Replicas,
            })
            .await;
        let extended = results.iter().filter(|r| matches!(r, Ok(1))).count();
        let refused = results.iter().filter(|r| matches!(r, Ok(0))).count();
        if extended >= nodes.quorum {
            Extended::Yes
        } else if refused > nodes.list.len() - nodes.quorum {
            // Held by nobody or someone else on a majority.
            Extended::Gone
        } else {
            Extended::Unsure(format!(
                "{extended} of {} nodes extended it; {} are needed",
                nodes.list.len(),
                nodes.quorum
            ))
        }
    }

    fn subject(&self) -> String {
        format!("lock {}", self.keys.lock)
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
    signal: LossSignal,
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
        let was_lost = self.signal.was_lost();
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
                        if unanswered[*i] && !self.signal.expiry.has_passed() =>
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
        self.signal.cause.get()
    }
}
