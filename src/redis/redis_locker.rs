//! `RedisLocker`: connecting, `try_lock`, and `lock`, which waits in the
//! queue round after round until granted.
//!
//! One code path serves a single instance and Redlock (see `attempt.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::election::RedisElector;
use crate::election::elector::leader_stream;
use crate::redis::config::redis_config::RedisConfig;
use crate::redis::connect::failed_op::is_in_use_as_line;
use crate::redis::connect::node::Nodes;
use crate::redis::hand_cycle::HandCycle;
use crate::redis::line::in_line::{try_shared, wait_shared};
use crate::redis::lock::attempt::{AttemptKind, LockAttempt, Round};
use crate::redis::protocol::line::in_use_as_line;
use crate::redis::state::{Core, fair_redlock_unsupported};
use crate::semantics::admission::Share;
use crate::semantics::fairness::Fairness;
use crate::semantics::mixed_use::{after_the_mutex, none_while_the_mutex, or_write_lock};
use crate::util::backoff::{Backoff, jitter};
use crate::util::observe;
use crate::{Context, Elector, Key, Leader, LeaderStream, Leadership, LockGuard, Locker, Result};

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

/// Waits in the queue until granted: a round, then a pause until a
/// wake-up, the next poll, or the holder's expiry; node errors are retried
/// for up to a TTL after the last round that reached a quorum (or the
/// call's start, behind sentinels or on a cluster), but for refusals (see
/// `FailedOp::refusal`), which end the wait at once.
async fn lock(core: &Arc<Core>, ctx: &Context, key: &Key) -> Result<LockGuard> {
    let mut attempt = LockAttempt::new(core, key, AttemptKind::Lock);
    let notify = Arc::clone(&attempt.notify);
    let waited = async {
        // Wake-ups need the subscriptions: wait for them (all nodes at
        // once, each at most a per-node timeout; polling covers the
        // rest), but not past the context.
        futures_util::future::join_all(
            core.nodes
                .list
                .iter()
                .map(|node| node.hub.ready(core.config.node_timeout())),
        )
        .await;
        // The first round's errors are reported at once, but where a
        // failover may be under way (`Core::first_round_patience`).
        let mut last_ok = core.first_round_patience();
        let (first_pause, max_pause) = core.config.retry_delay();
        let mut backoff = Backoff::new(first_pause, max_pause).with_jitter();
        loop {
            let wait = match attempt.round().await {
                Ok(Round::Granted(guard)) => return Ok(guard),
                Ok(Round::Busy {
                    split, expires_in, ..
                }) => {
                    if attempt.rounds() == 1 {
                        observe::queued(None);
                    }
                    last_ok = Some(Instant::now());
                    backoff.reset();
                    if split {
                        jitter(first_pause)
                    } else {
                        let poll = core.poll();
                        expires_in.map_or(poll, |e| (e + Duration::from_millis(1)).min(poll))
                    }
                }
                // Refresh the queue record before it expires.
                Err(e) => core.pause_after(e, last_ok, &mut backoff)?,
            };
            tokio::select! {
                () = notify.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    };
    let outcome = tokio::select! {
        res = waited => res,
        err = ctx.done(key.as_str()) => Err(err),
    };
    match outcome {
        Ok(guard) => Ok(guard),
        Err(e) => {
            // Leave the queue before reporting, so a caller who gave up
            // leaves nothing behind; if Redis does not answer in time,
            // the cleanup carries on in the background.
            attempt.abandon().await;
            Err(e)
        }
    }
}

/// A mutex's error, with the key's use as a read/write lock or semaphore
/// told as [`crate::Error::InvalidKey`].
fn mutex_error(e: crate::Error, key: &Key) -> crate::Error {
    if is_in_use_as_line(&e) {
        return in_use_as_line(key);
    }
    e
}

#[async_trait]
impl Locker for RedisLocker {
    async fn try_lock(&self, key: &Key) -> Result<Option<LockGuard>> {
        let take = async {
            let taken = self.try_lock_unobserved(key).await;
            or_write_lock(taken, self.try_shared(key, Ok(Share::Write))).await
        };
        observe::try_lock(self.core.site(), key, take).await
    }

    async fn lock(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        let wait = async {
            let locked = self.lock_unobserved(ctx, key).await;
            or_write_lock(locked, self.shared(ctx, key, Ok(Share::Write))).await
        };
        observe::lock(self.core.site(), key, wait).await
    }

    /// See [`Locker::read_lock`]. On one Redis instance, a cluster or
    /// sentinels; refused on Redlock ([`crate::Error::Unsupported`]).
    /// Readers and writers are granted in arrival order in both modes.
    async fn read_lock(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        observe::lock(
            self.core.site(),
            key,
            self.shared(ctx, key, Ok(Share::Read)),
        )
        .await
    }

    async fn try_read_lock(&self, key: &Key) -> Result<Option<LockGuard>> {
        observe::try_lock(self.core.site(), key, self.try_shared(key, Ok(Share::Read))).await
    }

    /// See [`Locker::write_lock`]; as [`RedisLocker::read_lock`].
    async fn write_lock(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        observe::lock(
            self.core.site(),
            key,
            self.shared(ctx, key, Ok(Share::Write)),
        )
        .await
    }

    async fn try_write_lock(&self, key: &Key) -> Result<Option<LockGuard>> {
        observe::try_lock(
            self.core.site(),
            key,
            self.try_shared(key, Ok(Share::Write)),
        )
        .await
    }

    /// See [`Locker::acquire_permits`]; as [`RedisLocker::read_lock`].
    async fn acquire_permits(
        &self,
        ctx: &Context,
        key: &Key,
        n: u32,
        limit: u32,
    ) -> Result<LockGuard> {
        let share = Share::permits(n, limit);
        observe::lock(self.core.site(), key, self.shared(ctx, key, share)).await
    }

    async fn try_acquire_permits(
        &self,
        key: &Key,
        n: u32,
        limit: u32,
    ) -> Result<Option<LockGuard>> {
        let share = Share::permits(n, limit);
        observe::try_lock(self.core.site(), key, self.try_shared(key, share)).await
    }

    async fn campaign(&self, ctx: &Context, election: &Key, value: Vec<u8>) -> Result<Leadership> {
        self.elector().campaign(ctx, election, &value).await
    }

    async fn leader(&self, election: &Key) -> Result<Option<Leader>> {
        self.elector().leader(election).await
    }

    fn observe(&self, election: &Key) -> LeaderStream {
        let (elector, election) = (self.elector(), election.clone());
        leader_stream(async move { elector.observe(&election).await })
    }

    fn is_fair(&self) -> bool {
        self.core.fairness.is_fair()
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

impl RedisLocker {
    async fn try_lock_unobserved(&self, key: &Key) -> Result<Option<LockGuard>> {
        key.validate()?;
        self.core.nodes.layout.check(key)?;
        self.core.check_mode()?;
        let round = async || {
            let mut attempt = LockAttempt::new(&self.core, key, AttemptKind::TryLock);
            match attempt.round().await {
                Ok(Round::Granted(guard)) => Ok(Some(guard)),
                Ok(Round::Busy { unsure, .. }) => {
                    // A node that did not answer may grant us the lock
                    // late: stay armed, so that dropping the attempt
                    // releases there.
                    attempt.stay_armed(unsure);
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        };
        self.core
            .riding_out_replicas(round)
            .await
            .map_err(|e| mutex_error(e, key))
    }

    /// Checks a read/write lock's or semaphore's call (`share` is the
    /// result of checking its arguments) before it is sent.
    fn check_shared(&self, key: &Key, share: Result<Share>) -> Result<Share> {
        let what = match share {
            Ok(Share::Read | Share::Write) => "read/write locks",
            _ => "semaphores",
        };
        self.core.check_single(what)?;
        let share = share?;
        key.validate()?;
        self.core.nodes.layout.check(key)?;
        Ok(share)
    }

    async fn shared(&self, ctx: &Context, key: &Key, share: Result<Share>) -> Result<LockGuard> {
        let share = self.check_shared(key, share)?;
        ctx.check(key.as_str())?;
        // Boxed: the waiting future nests deep enough to overflow the
        // compiler's layout query depth inside the trait's boxed futures.
        let wait = after_the_mutex(ctx, key, || wait_shared(&self.core, ctx, key, share));
        Box::pin(wait).await
    }

    async fn try_shared(&self, key: &Key, share: Result<Share>) -> Result<Option<LockGuard>> {
        let share = self.check_shared(key, share)?;
        let entered = self
            .core
            .riding_out_replicas(async || try_shared(&self.core, key, share).await)
            .await;
        none_while_the_mutex(entered)
    }

    async fn lock_unobserved(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        key.validate()?;
        self.core.nodes.layout.check(key)?;
        ctx.check(key.as_str())?;
        self.core.check_mode()?;
        lock(&self.core, ctx, key)
            .await
            .map_err(|e| mutex_error(e, key))
    }
}
