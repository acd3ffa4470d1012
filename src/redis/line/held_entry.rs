//! A held read lock, write lock or permit on Redis: how its entry is
//! extended (the renewal loop that declares it lost when it cannot is
//! `semantics/renew.rs`), and the release behind `LockGuard::unlock`. Read/write locks and
//! semaphores run on one node (never Redlock), so there is no quorum here.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use tokio::task::AbortHandle;

use crate::redis::connect::node::{Admission, Call, Reach};
use crate::redis::protocol::line::{Left, LineKeys};
use crate::redis::protocol::line_lua::{EXTEND_SCRIPT, LEAVE_SCRIPT};
use crate::redis::state::Core;
use crate::semantics::renew::{Extended, LossSignal, Renew, renew};
use crate::util::backoff::Backoff;
use crate::{Error, GuardRelease, Key, LockGuard, LossCause, Result};

/// Builds the guard of entry `id`, granted `token` by a request sent at
/// `started`, and starts its renewal. Its local deadline counts from
/// `started`, as the mutex's does (see `held_lock.rs`).
pub(crate) fn guard(
    core: Arc<Core>,
    key: Key,
    keys: LineKeys,
    id: String,
    token: u64,
    started: Instant,
) -> LockGuard {
    let timing = core.renewal();
    let signal = LossSignal::until(started + timing.trusted);
    let entry = EntryRenew {
        core: Arc::clone(&core),
        keys: keys.clone(),
        id: id.clone(),
    };
    let task = tokio::spawn(renew(entry, timing, started, signal.clone()));
    let held = HeldEntry {
        core,
        key: key.clone(),
        keys,
        id,
        signal: signal.clone(),
        watchdog: task.abort_handle(),
    };
    signal.guard(key, token, Box::new(held))
}

/// How an entry is extended: on the line's one node.
struct EntryRenew {
    core: Arc<Core>,
    keys: LineKeys,
    id: String,
}

impl Renew for EntryRenew {
    const BACKEND: &'static str = "redis";
    const GONE: &'static str = "its entry in the line is gone";

    async fn extend(&self) -> Extended {
        let answer = self
            .core
            .single_node()
            .run::<i64>(Call {
                script: &EXTEND_SCRIPT,
                keys: &self.keys.script_keys(),
                args: vec![
                    self.id.clone(),
                    self.keys.entries.clone(),
                    self.core.config.ttl_ms().to_string(),
                ],
                reach: Reach::Replicas,
                admission: Admission::Holder,
            })
            .await;
        match answer {
            Ok(0) => Extended::Gone,
            Ok(_) => Extended::Yes,
            Err(_) => Extended::Unsure("the extend of its entry got no answer".into()),
        }
    }

    fn subject(&self) -> String {
        format!("line {}", self.keys.line)
    }
}

/// A held entry of a line: what a guard releases.
struct HeldEntry {
    core: Arc<Core>,
    key: Key,
    keys: LineKeys,
    id: String,
    signal: LossSignal,
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
        let was_lost = self.signal.was_lost();
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
                    admission: Admission::Holder,
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
            Left::Gone if unanswered && !self.signal.expiry.has_passed() => Ok(()),
            Left::Gone | Left::Waited => {
                Err(self.lost_error("its entry had expired or was deleted at unlock"))
            }
        }
    }

    fn loss_cause(&self) -> Option<LossCause> {
        self.signal.cause.get()
    }
}
