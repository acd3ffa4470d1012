//! `RedisLocker`: connecting, `try_lock`, and `lock`, which waits in the
//! queue round after round until granted.
//!
//! One code path serves a single instance and Redlock (see `attempt.rs`).

use std::sync::Arc;

use super::election::RedisElector;
use crate::redis::config::redis_config::RedisConfig;
use crate::redis::connect::node::Nodes;
use crate::redis::hand_cycle::HandCycle;
use crate::redis::line::in_line::{try_shared, wait_shared};
use crate::redis::lock::all_keys;
use crate::redis::lock::attempt::{AttemptKind, LockAttempt, Round, mutex_error};
use crate::redis::lock::take_all;
use crate::redis::pace::Pace;
use crate::redis::state::{Core, fair_redlock_unsupported};
use crate::semantics::admission::Share;
use crate::semantics::all_keys::KeyLimit;
use crate::semantics::armed::turn_or_done;
use crate::semantics::dispatch::{LockServer, Want, impl_locker};
use crate::semantics::fairness::Fairness;
use crate::util::observe::Site;
use crate::{Context, Key, LockGuard, Result};

/// A fair or unfair locker on one Redis instance, or on several
/// independent masters with Redlock.
///
/// Cheap to clone. Lockers made by one [`super::register`] call (or cloned
/// from one) share the connections: one per node, plus one pub/sub
/// subscriber per node for wake-ups.
///
/// Fair mode needs a single instance: [`RedisLocker::connect`] refuses it
/// for Redlock (see the [module docs](super)).
///
/// # Examples
/// ```no_run
/// # async fn demo() -> fairlock::Result<()> {
/// use fairlock::{Context, Key, Locker};
/// use fairlock::redis::{RedisConfig, RedisLocker};
///
/// let locker = RedisLocker::connect(RedisConfig::new(["redis://127.0.0.1:6379"]), true).await?;
/// if let Some(guard) = locker.try_lock(&Key::from("reports")).await? {
///     // ... work, passing guard.fencing_token() to the resource ...
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisLocker {
    core: Arc<Core>,
}

impl RedisLocker {
    /// Connects to the configured node(s) and makes a locker, fair (arrival
    /// order) or unfair.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> fairlock::Result<()> {
    /// use fairlock::redis::{RedisConfig, RedisLocker};
    ///
    /// // No port: 6379.
    /// let locker = RedisLocker::connect(RedisConfig::new(["redis://127.0.0.1"]), false).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] for a bad configuration (a mistyped
    /// scheme names the URL likely meant); [`crate::Error::Unsupported`] for
    /// fair mode on more than one node (Redlock); [`crate::Error::Connect`]
    /// naming the nodes that did not answer when fewer than a quorum answer
    /// within the connect timeout (at once when they refuse connections).
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is written to Redis until the first lock.
    pub async fn connect(config: RedisConfig, fair: bool) -> Result<Self> {
        let config = config.with_url_options()?;
        config.validate()?;
        if fair && config.is_redlock() {
            return Err(fair_redlock_unsupported());
        }
        let nodes = Nodes::connect(&config).await?;
        Ok(Self::from_nodes(nodes, config, Fairness::from_fair(fair)))
    }

    pub(crate) fn from_nodes(nodes: Arc<Nodes>, config: RedisConfig, fairness: Fairness) -> Self {
        RedisLocker {
            core: Arc::new(Core::new(nodes, config, fairness)),
        }
    }

    /// A new locker, fair or unfair, sharing this one's connections (with
    /// its own id). On Redlock a fair one fails every call with
    /// [`crate::Error::Unsupported`].
    #[must_use]
    pub fn locker(&self, fair: bool) -> RedisLocker {
        Self::from_nodes(
            Arc::clone(&self.core.nodes),
            self.core.config.clone(),
            Fairness::from_fair(fair),
        )
    }

    /// This locker's id, as `locker=<id>` in its owner values and
    /// [`crate::LockWaiter::locker`] in [`RedisLocker::status`].
    #[must_use]
    pub fn id(&self) -> &str {
        &self.core.id
    }

    /// The configuration in use.
    #[must_use]
    pub fn config(&self) -> &RedisConfig {
        &self.core.config
    }

    pub(crate) fn inner(&self) -> &Arc<Core> {
        &self.core
    }

    /// For the bench's floor row; not API: see [`HandCycle`].
    #[doc(hidden)]
    #[must_use]
    pub fn hand_cycle(&self, key: &Key) -> HandCycle {
        HandCycle::new(&self.core, key)
    }
}

/// Waits in the queue until granted: a round, then a pause (`pace.rs`);
/// a round that reaches no quorum of nodes counts as failed.
async fn lock(core: &Arc<Core>, ctx: &Context, key: &Key) -> Result<LockGuard> {
    let mut attempt = LockAttempt::new(core, key, AttemptKind::Lock);
    let notify = Arc::clone(&attempt.notify);
    let waited = async {
        core.wakeups_ready().await;
        let mut pace = Pace::new(core, notify);
        // A single key's rounds make a lost entry again (`Joined::Yes`):
        // never `None`.
        loop {
            if let Some(guard) = attempt.until_granted(&mut pace).await? {
                return Ok(guard);
            }
        }
    };
    match turn_or_done(ctx, key, waited).await {
        Ok(guard) => Ok(guard),
        Err(e) => {
            // Leave the queue before reporting, so a caller who gave up
            // leaves nothing behind; if Redis does not answer in time,
            // the cleanup carries on in the background.
            attempt.abandon(core.config.node_timeout()).await;
            Err(e)
        }
    }
}

impl RedisLocker {
    /// An elector on this locker's connections; its campaigns wait in
    /// arrival order, whether this locker is fair or not (this locker if
    /// it is fair, else a fair one with an id of its own).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(locker: fairlock::redis::RedisLocker) -> fairlock::Result<()> {
    /// use fairlock::{Elector, Key};
    ///
    /// let elector = locker.elector();
    /// if let Some(leader) = elector.leader(&Key::from("scheduler")).await? {
    ///     println!("led by {:?}", leader.value_str());
    /// }
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn elector(&self) -> RedisElector {
        let fair = if self.core.fairness.is_fair() {
            self.clone()
        } else {
            self.locker(true)
        };
        RedisElector::new(Arc::new(fair.clone()), fair.core)
    }
}

impl LockServer for RedisLocker {
    type Elector = RedisElector;

    fn fairness(&self) -> Fairness {
        self.core.fairness
    }

    fn site(&self) -> Site {
        self.core.site()
    }

    fn admits(&self, key: &Key, want: Want) -> Result<()> {
        match want {
            Want::Mutex => self.core.check_mode()?,
            Want::Line(Share::Read | Share::Write) => self.core.check_single("read/write locks")?,
            Want::Line(_) => self.core.check_single("semaphores")?,
        }
        self.core.nodes.layout.check(key)
    }

    async fn lock_mutex(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        lock(&self.core, ctx, key)
            .await
            .map_err(|e| mutex_error(e, key))
    }

    async fn try_lock_mutex(&self, key: &Key) -> Result<Option<LockGuard>> {
        let round = async || {
            let mut attempt = LockAttempt::new(&self.core, key, AttemptKind::TryLock);
            match attempt.round(self.core.poll()).await {
                Ok(Round::Granted(guard)) => Ok(Some(guard)),
                Ok(Round::Busy { unsure, .. }) => {
                    // A node that did not answer may grant us the lock
                    // late: stay armed, so that dropping the attempt
                    // releases there.
                    attempt.set_armed(unsure);
                    Ok(None)
                }
                // Only a place `lock_all` kept is lost: not a try's.
                Ok(Round::PlaceLost) => Ok(None),
                Err(e) => Err(e),
            }
        };
        self.core
            .riding_out_replicas(round)
            .await
            .map_err(|e| mutex_error(e, key))
    }

    /// Redis itself would take more: a call is one script with three
    /// `KEYS` and three arguments per key (each key named about six times,
    /// under 1 MiB at 128 KiB of keys), far below Redis' limits. The bound
    /// is on the script's length: Redis runs nothing else while it runs,
    /// and 32 acquires stay well under a millisecond. The same as etcd's,
    /// so a call that works on one backend works on the other.
    fn key_limit(&self) -> KeyLimit {
        KeyLimit {
            keys: 32,
            bytes: 128 * 1024,
            why: "one script takes them all, and Redis runs nothing else meanwhile; etcd's bound",
        }
    }

    /// Refused on Redlock, and on a cluster for keys of several slots
    /// (`lock/all_keys.rs`).
    fn admits_all(&self, keys: &[Key]) -> Result<()> {
        all_keys::admits_all(&self.core, keys)?;
        self.core.check_mode()
    }

    async fn lock_mutexes(&self, ctx: &Context, keys: &[Key]) -> Result<Vec<LockGuard>> {
        all_keys::lock_all(&self.core, ctx, keys).await
    }

    async fn try_lock_mutexes(&self, keys: &[Key]) -> Result<Option<Vec<LockGuard>>> {
        take_all::try_lock_all(&self.core, keys).await
    }

    async fn join_line(&self, ctx: &Context, key: &Key, share: Share) -> Result<LockGuard> {
        wait_shared(&self.core, ctx, key, share).await
    }

    async fn try_join_line(&self, key: &Key, share: Share) -> Result<Option<LockGuard>> {
        self.core
            .riding_out_replicas(async || try_shared(&self.core, key, share).await)
            .await
    }

    fn candidate(&self) -> RedisElector {
        self.elector()
    }
}

impl_locker!(RedisLocker);
