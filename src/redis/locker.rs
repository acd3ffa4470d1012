//! `RedisLocker`: connecting, `try_lock`, `lock`, and the attempt
//! bookkeeping that makes cancellation leave nothing behind.
//!
//! One code path serves a single instance and Redlock: a round runs the
//! acquire script on every node at once and succeeds when a quorum (1 of 1,
//! or N/2+1 of N) granted within the validity time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::Notify;

use super::config::RedisConfig;
use super::keys::{Layout, owner_value};
use super::node::{Call, Nodes};
use super::scripts::{ACQUIRE_SCRIPT, LEAVE_SCRIPT, RAISE_SCRIPT, RELEASE_SCRIPT};
use super::watchdog;
use crate::observe::{self, Site};
use crate::{Context, Error, Key, LockGuard, Locker, Result};

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
    inner: Arc<Inner>,
}

/// Everything a locker's operations share.
pub(crate) struct Inner {
    pub nodes: Arc<Nodes>,
    pub config: RedisConfig,
    pub fair: bool,
    /// Written into owner values as `locker=<id>`.
    pub id: String,
}

impl RedisLocker {
    /// Connects to the configured node(s) and makes a locker, fair (arrival
    /// order) or unfair.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad configuration;
    /// [`Error::Unsupported`] for fair mode on more than one node (Redlock);
    /// [`Error::Connect`] naming the nodes that did not answer when fewer
    /// than a quorum answer within the connect timeout.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is written to Redis until the first lock.
    pub async fn connect(config: RedisConfig, fair: bool) -> Result<Self> {
        config.validate()?;
        if fair && config.is_redlock() {
            return Err(fair_redlock_unsupported());
        }
        let nodes = Nodes::connect(&config).await?;
        Ok(Self::from_nodes(nodes, config, fair))
    }

    pub(crate) fn from_nodes(nodes: Arc<Nodes>, config: RedisConfig, fair: bool) -> Self {
        RedisLocker {
            inner: Arc::new(Inner {
                nodes,
                config,
                fair,
                id: uuid::Uuid::new_v4().simple().to_string(),
            }),
        }
    }

    /// A new locker, fair or unfair, sharing this one's connections (with
    /// its own id). On Redlock a fair one fails every call with
    /// [`Error::Unsupported`].
    #[must_use]
    pub fn locker(&self, fair: bool) -> RedisLocker {
        Self::from_nodes(
            Arc::clone(&self.inner.nodes),
            self.inner.config.clone(),
            fair,
        )
    }

    /// This locker's id, as `locker=<id>` in its owner values and
    /// [`crate::LockWaiter::locker`] in [`RedisLocker::status`].
    #[must_use]
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The configuration in use.
    #[must_use]
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }
}

/// The error for fair mode on Redlock.
pub(crate) fn fair_redlock_unsupported() -> Error {
    Error::Unsupported(
        "fair mode on Redlock (several redis:// URLs): independent masters cannot agree \
         on one arrival order without consensus; use one Redis instance or etcd for fair \
         locks, or unfair mode on Redlock"
            .into(),
    )
}

/// What one round on every node came to.
enum Round {
    Granted(LockGuard),
    /// Held by another. `split`: some nodes granted but too few (Redlock),
    /// so retry after a random pause; `expires_in`: when the holder's key
    /// expires if nobody renews it; `unsure`: some node did not answer, so
    /// it may still apply our request later.
    Busy {
        split: bool,
        expires_in: Option<Duration>,
        unsure: bool,
    },
}

/// One call to `lock`/`try_lock`: its owner value and waiter id, so that
/// giving up (error, cancel or drop) removes what it wrote.
struct Attempt {
    inner: Arc<Inner>,
    key: Key,
    layout: Layout,
    /// `f<uuid>` or `u<uuid>`: the queue member and waiter record name.
    id: String,
    owner: String,
    /// Waits in the queue (`lock`), or not (`try_lock`).
    queued: bool,
    notify: Arc<Notify>,
    armed: bool,
    /// Rounds sent so far: from the second on, `id` may be queued.
    rounds: u32,
}

impl Attempt {
    fn new(inner: &Arc<Inner>, key: &Key, queued: bool) -> Self {
        let mode = if inner.fair { 'f' } else { 'u' };
        let id = format!("{mode}{}", uuid::Uuid::new_v4().simple());
        let notify = Arc::new(Notify::new());
        if queued {
            for node in &inner.nodes.list {
                node.hub.register(&id, &notify);
            }
        }
        Attempt {
            owner: owner_value(&id, &inner.id),
            layout: Layout::new(inner.config.prefix(), key),
            inner: Arc::clone(inner),
            key: key.clone(),
            id,
            queued,
            notify,
            armed: true,
            rounds: 0,
        }
    }

    /// Runs the acquire script on every node and decides.
    async fn round(&mut self) -> Result<Round> {
        let inner = Arc::clone(&self.inner);
        let nodes = &inner.nodes;
        let config = &inner.config;
        let layout = &self.layout;
        let keys = [
            layout.lock.as_str(),
            layout.queue.as_str(),
            layout.fence.as_str(),
        ];
        let ttl_ms = config.ttl_ms().to_string();
        let record_ms = inner.record_ttl().as_millis().to_string();
        let mode = if inner.fair { "f" } else { "u" };
        let id = if self.queued { self.id.as_str() } else { "" };
        let joined = if self.rounds > 0 { "1" } else { "0" };
        self.rounds += 1;
        let started = Instant::now();
        let results: Vec<Result<(i64, i64), _>> = nodes
            .all(|_, node| Call {
                script: &ACQUIRE_SCRIPT,
                keys: &keys,
                args: vec![
                    self.owner.clone(),
                    ttl_ms.clone(),
                    mode.into(),
                    id.into(),
                    layout.waiters.clone(),
                    layout.wake.clone(),
                    node.hub.id.clone(),
                    record_ms.clone(),
                    joined.into(),
                ],
            })
            .await;
        let mut granted = Vec::new();
        let mut busy = vec![false; nodes.list.len()];
        let mut expires_in: Option<Duration> = None;
        let mut errors = Vec::new();
        for (i, result) in results.into_iter().enumerate() {
            match result {
                Ok((1, token)) => granted.push((i, u64::try_from(token).unwrap_or_default())),
                Ok((_, pttl)) => {
                    busy[i] = true;
                    if let Ok(ms) = u64::try_from(pttl) {
                        let d = Duration::from_millis(ms);
                        expires_in = Some(expires_in.map_or(d, |e| e.min(d)));
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        // A grant counts only if its local deadline (which leaves room for
        // drift and the margin) is still ahead.
        let valid = |at: Instant| config.validity_left(at.elapsed()).is_some();
        if granted.len() >= nodes.quorum && valid(started) {
            let token = granted.iter().map(|(_, t)| *t).max().unwrap_or_default();
            let agreed = granted.iter().filter(|(_, t)| *t == token).count();
            let raised =
                agreed >= nodes.quorum || self.raise(&granted, token).await >= nodes.quorum;
            if raised && valid(started) {
                return Ok(Round::Granted(self.granted(token, started, &granted)));
            }
        }
        // Too few grants (or too late): give back what we got, and what a
        // node that did not answer may have granted all the same (its
        // request can still be applied late); only nodes that answered
        // "busy" hold nothing of ours.
        let split = !granted.is_empty();
        let unsure = !errors.is_empty();
        if split || unsure {
            let _ = futures_util::future::join_all(
                (0..nodes.list.len()).filter(|i| !busy[*i]).map(|i| {
                    nodes.list[i].run::<i64>(Call {
                        script: &RELEASE_SCRIPT,
                        keys: &keys,
                        args: vec![
                            self.owner.clone(),
                            layout.waiters.clone(),
                            layout.wake.clone(),
                        ],
                    })
                }),
            )
            .await;
        }
        if nodes.list.len() - errors.len() < nodes.quorum {
            return Err(nodes.unavailable("lock", errors));
        }
        Ok(Round::Busy {
            split,
            expires_in,
            unsure,
        })
    }

    /// Redlock: raises the fence counters of the granting nodes to `token`;
    /// returns on how many nodes that was done while still held there.
    async fn raise(&self, granted: &[(usize, u64)], token: u64) -> usize {
        let nodes = &self.inner.nodes;
        let keys = [
            self.layout.lock.as_str(),
            self.layout.queue.as_str(),
            self.layout.fence.as_str(),
        ];
        let results = futures_util::future::join_all(granted.iter().map(|(i, _)| {
            nodes.list[*i].run::<i64>(Call {
                script: &RAISE_SCRIPT,
                keys: &keys,
                args: vec![self.owner.clone(), token.to_string()],
            })
        }))
        .await;
        results.into_iter().filter(|r| matches!(r, Ok(1))).count()
    }

    /// The guard for a grant; the attempt is done.
    fn granted(&mut self, token: u64, started: Instant, granted: &[(usize, u64)]) -> LockGuard {
        self.armed = false;
        // Nodes that did not grant may still hold our queue entry (a grant
        // removed it on its own node, so nothing is sent where all granted).
        if self.queued {
            let others: Vec<usize> = (0..self.inner.nodes.list.len())
                .filter(|i| !granted.iter().any(|(g, _)| g == i))
                .collect();
            if !others.is_empty() {
                self.spawn_leave(true, others);
            }
        }
        watchdog::guard(
            Arc::clone(&self.inner),
            self.key.clone(),
            self.layout.clone(),
            self.owner.clone(),
            token,
            started,
        )
    }

    /// Sends the leave script once to `nodes`; returns those that did not
    /// answer. `only_queue`: keep any lock (leave the queue only).
    async fn leave(&self, only_queue: bool, nodes: &[usize]) -> Vec<usize> {
        leave(
            &self.inner,
            &self.layout,
            &self.id,
            &self.leave_owner(only_queue),
            nodes,
        )
        .await
    }

    /// The owner value the leave script matches a held lock against: none
    /// when the lock is to be kept.
    fn leave_owner(&self, only_queue: bool) -> String {
        if only_queue {
            String::new()
        } else {
            self.owner.clone()
        }
    }

    /// Removes what this attempt wrote on `nodes` (queue entries; a lock
    /// handed over meanwhile is released and passed on) in the background,
    /// retrying nodes that do not answer for about one TTL.
    fn spawn_leave(&self, only_queue: bool, nodes: Vec<usize>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = Arc::clone(&self.inner);
        let layout = self.layout.clone();
        let id = self.id.clone();
        let owner = self.leave_owner(only_queue);
        rt.spawn(async move {
            let mut pause = inner.config.retry_delay().0;
            // After about a TTL our records have expired anyway.
            let give_up = Instant::now() + inner.config.ttl();
            let mut pending = nodes;
            while !pending.is_empty() && Instant::now() < give_up {
                pending = leave(&inner, &layout, &id, &owner, &pending).await;
                if !pending.is_empty() {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(inner.config.retry_delay().1);
                }
            }
        });
    }

    /// Gives up: removes what the attempt wrote, with one request per node
    /// (each bounded by the per-node timeout); nodes that did not answer
    /// are retried in the background.
    async fn abandon(mut self) {
        let all: Vec<usize> = (0..self.inner.nodes.list.len()).collect();
        // Still armed: if this future is dropped half way, Drop cleans up.
        let pending = self.leave(false, &all).await;
        self.armed = false;
        if !pending.is_empty() {
            self.spawn_leave(false, pending);
        }
    }
}

/// Sends the leave script once to `nodes`; returns those that did not answer.
async fn leave(
    inner: &Inner,
    layout: &Layout,
    id: &str,
    owner: &str,
    nodes: &[usize],
) -> Vec<usize> {
    let keys = [
        layout.lock.as_str(),
        layout.queue.as_str(),
        layout.fence.as_str(),
    ];
    let results = futures_util::future::join_all(nodes.iter().map(|i| {
        inner.nodes.list[*i].run::<i64>(Call {
            script: &LEAVE_SCRIPT,
            keys: &keys,
            args: vec![
                owner.to_owned(),
                id.to_owned(),
                layout.waiters.clone(),
                layout.wake.clone(),
            ],
        })
    }))
    .await;
    nodes
        .iter()
        .zip(results)
        .filter(|(_, r)| r.is_err())
        .map(|(i, _)| *i)
        .collect()
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if self.queued {
            for node in &self.inner.nodes.list {
                node.hub.deregister(&self.id);
            }
        }
        if self.armed {
            self.armed = false;
            self.spawn_leave(false, (0..self.inner.nodes.list.len()).collect());
        }
    }
}

/// A random duration below `max` (jitter).
pub(crate) fn jitter(max: Duration) -> Duration {
    let random = uuid::Uuid::new_v4().as_u128() as u64;
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX).max(1);
    Duration::from_nanos(random % nanos)
}

impl Inner {
    fn site(&self) -> Site {
        Site::new("redis", self.fair)
    }

    /// How often a waiter re-checks (and refreshes its queue record)
    /// without a wake-up: a fallback for lost messages.
    fn poll(&self) -> Duration {
        (self.config.ttl() / 3).min(Duration::from_secs(1))
    }

    /// How long a waiter record lives without a refresh: three polls. A
    /// fair handoff grants the lock for this long only, until the grantee
    /// confirms it, so a handoff to a waiter that died meanwhile blocks the
    /// lock for this long rather than a whole TTL.
    fn record_ttl(&self) -> Duration {
        self.poll() * 3
    }

    async fn lock(self: &Arc<Self>, ctx: &Context, key: &Key) -> Result<LockGuard> {
        let mut attempt = Attempt::new(self, key, true);
        let notify = Arc::clone(&attempt.notify);
        let waited = async {
            // Wake-ups need the subscriptions: wait for them (all nodes at
            // once, each at most a per-node timeout; polling covers the
            // rest), but not past the context.
            futures_util::future::join_all(
                self.nodes
                    .list
                    .iter()
                    .map(|node| node.hub.ready(self.config.node_timeout())),
            )
            .await;
            // Node errors while waiting are retried for up to a TTL after
            // the last round that reached a quorum; the first round's are
            // reported at once.
            let mut last_ok: Option<Instant> = None;
            let (first_pause, max_pause) = self.config.retry_delay();
            let mut pause = first_pause;
            loop {
                let round = attempt.round().await;
                let wait = match round {
                    Ok(Round::Granted(guard)) => return Ok(guard),
                    Ok(Round::Busy {
                        split, expires_in, ..
                    }) => {
                        if attempt.rounds == 1 {
                            observe::queued(None);
                        }
                        last_ok = Some(Instant::now());
                        pause = first_pause;
                        if split {
                            jitter(first_pause)
                        } else {
                            let poll = self.poll();
                            expires_in.map_or(poll, |e| (e + Duration::from_millis(1)).min(poll))
                        }
                    }
                    Err(e) => match last_ok {
                        Some(at) if at.elapsed() < self.config.ttl() => {
                            let wait = pause + jitter(pause);
                            pause = (pause * 2).min(max_pause);
                            // Refresh the queue record before it expires.
                            observe::retrying(self.site(), &e, wait.min(self.poll()));
                            wait.min(self.poll())
                        }
                        _ => return Err(e),
                    },
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
}

#[async_trait]
impl Locker for RedisLocker {
    async fn try_lock(&self, key: &Key) -> Result<Option<LockGuard>> {
        observe::try_lock(self.inner.site(), key, self.try_lock_unobserved(key)).await
    }

    async fn lock(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        observe::lock(self.inner.site(), key, self.lock_unobserved(ctx, key)).await
    }

    fn is_fair(&self) -> bool {
        self.inner.fair
    }
}

impl RedisLocker {
    async fn try_lock_unobserved(&self, key: &Key) -> Result<Option<LockGuard>> {
        key.validate()?;
        if self.inner.fair && self.inner.nodes.is_redlock() {
            return Err(fair_redlock_unsupported());
        }
        let mut attempt = Attempt::new(&self.inner, key, false);
        match attempt.round().await {
            Ok(Round::Granted(guard)) => Ok(Some(guard)),
            Ok(Round::Busy { unsure, .. }) => {
                // A node that did not answer may grant us the lock late:
                // stay armed, so that dropping the attempt releases there.
                attempt.armed = unsure;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    async fn lock_unobserved(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        key.validate()?;
        ctx.check(key.as_str())?;
        if self.inner.fair && self.inner.nodes.is_redlock() {
            return Err(fair_redlock_unsupported());
        }
        self.inner.lock(ctx, key).await
    }
}
