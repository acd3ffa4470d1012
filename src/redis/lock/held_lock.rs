//! A held lock: how it is extended (the renewal loop that declares it
//! lost when it cannot is `semantics/renew.rs`, started by the deferred
//! watchdog of `deferred.rs`), and the release behind `LockGuard::unlock`.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use crate::api::guard::release_each;
use crate::api::multi_guard::all_of_kind;
use crate::redis::connect::node::{Admission, Call, Reach};
use crate::redis::lock::deferred::Watchdog;
use crate::redis::protocol::keys::LockKeys;
use crate::redis::protocol::lock_args::release_args;
use crate::redis::protocol::lock_lua::{EXTEND_SCRIPT, RELEASE_SCRIPT, Released};
use crate::redis::protocol::release_all_lua::{self, RELEASE_ALL_SCRIPT};
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
                admission: Admission::Holder,
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
                    admission: Admission::Holder,
                })
                .await;
            let mut still = Vec::new();
            let mut errors = Vec::new();
            for (i, r) in pending.iter().zip(results) {
                match r.map(Released::from_answer) {
                    Ok(answer) => released += usize::from(self.ours_until(answer, unanswered[*i])),
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
        self.outcome(was_lost, released >= nodes.quorum)
    }

    fn loss_cause(&self) -> Option<LossCause> {
        self.signal.cause.get()
    }

    /// The keys of one `lock_all` on this locker: released in one script
    /// ([`release_all`]). Locks of anything else: each on its own.
    async fn release_with(self: Box<Self>, others: Vec<Box<dyn GuardRelease>>) -> Vec<Result<()>> {
        // Redlock never grants `lock_all` (no one atomic step on several
        // masters); one node is one request.
        if self.core.nodes.list.len() != 1 {
            let all = std::iter::once(self as Box<dyn GuardRelease>).chain(others);
            return release_each(all.collect()).await;
        }
        match all_of_kind(self, others, |a, b| Arc::ptr_eq(&a.core, &b.core)) {
            Ok(helds) => release_all(helds).await,
            Err(each) => release_each(each).await,
        }
    }
}

impl HeldLock {
    /// Whether a node's `answer` to our release means the lock was ours
    /// until the release: it was (`Ours`), or a release of ours that got
    /// no answer (`unanswered`) removed it before the guard's deadline
    /// (the key gone or granted on since).
    fn ours_until(&self, answer: Released, unanswered: bool) -> bool {
        match answer {
            Released::Ours => true,
            Released::Gone | Released::LaterGrant => unanswered && !self.signal.expiry.has_passed(),
            Released::Other => false,
        }
    }

    /// The result of a release: lost if the watchdog saw the lock lost
    /// before (`was_lost`), or the release found it gone (not `released`).
    fn outcome(&self, was_lost: bool, released: bool) -> Result<()> {
        if was_lost {
            return Err(self.lost_error(
                "its TTL passed without an acknowledged extend (Redis unreachable, or \
                 this process paused) before unlock",
            ));
        }
        if !released {
            return Err(
                self.lost_error("the lock key had expired or belonged to another holder at unlock")
            );
        }
        Ok(())
    }
}

/// Releases `helds`, the keys of one `lock_all` on one node (a single
/// instance, behind sentinels, or one slot of a cluster), in one script
/// (`protocol/release_all_lua.rs`), retried as the release of one lock is
/// until it is answered or the locks would have expired anyway. Each
/// key's answer is read as that lock's own release's.
async fn release_all(helds: Vec<HeldLock>) -> Vec<Result<()>> {
    let Some(first) = helds.first() else {
        return Vec::new();
    };
    let core = Arc::clone(&first.core);
    let was_lost: Vec<bool> = helds
        .iter()
        .map(|h| {
            h.watchdog.stop();
            h.signal.was_lost()
        })
        .collect();
    let locks: Vec<_> = helds
        .iter()
        .map(|h| {
            let token = h.tokens.first().map_or("", String::as_str);
            (h.keys.script_keys(), release_args(&h.owner, &h.keys, token))
        })
        .collect();
    let Some((keys, args)) = release_all_lua::keys_and_args(&locks) else {
        return helds.iter().map(|_| Ok(())).collect();
    };
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let (first_delay, max) = core.config.retry_delay();
    let mut backoff = Backoff::new(first_delay, max).with_jitter();
    let give_up = Instant::now() + core.config.ttl();
    // Set once a run got no answer: Redis may have applied it.
    let mut unanswered = false;
    let answers = loop {
        let call = Call {
            script: &RELEASE_ALL_SCRIPT,
            keys: &keys,
            args: args.clone(),
            reach: Reach::Master,
            admission: Admission::Holder,
        };
        match core.single_node().run::<Vec<i64>>(call).await {
            Ok(answers) if answers.len() == helds.len() => break answers,
            Ok(_) => return failed_all(helds.len(), core.unexpected("unlock")),
            Err(e) if Instant::now() >= give_up => {
                return failed_all(helds.len(), core.nodes.unavailable("unlock", vec![e]));
            }
            Err(_) => {
                unanswered = true;
                backoff.sleep().await;
            }
        }
    };
    helds
        .iter()
        .zip(answers)
        .zip(was_lost)
        .map(|((held, answer), was_lost)| {
            let released = held.ours_until(Released::from_answer(answer), unanswered);
            held.outcome(was_lost, released)
        })
        .collect()
}

/// The results of `n` keys released in one request that failed with
/// `error`: the first key's is `error`, the others' point to it.
fn failed_all(n: usize, error: Error) -> Vec<Result<()>> {
    let same = error.to_string();
    std::iter::once(Err(error))
        .chain((1..n).map(|_| {
            Err(Error::Backend {
                backend: "redis",
                op: "unlock",
                source: format!("released in one script with the first key, which failed: {same}")
                    .into(),
            })
        }))
        .collect()
}
