//! Leader election on Redis (one instance, a cluster or sentinels; not
//! Redlock): [`RedisElector`]. An election is the fair lock of its name
//! plus the leader's record, which every change announces on a channel;
//! `protocol.rs` specifies the names, the record and the scripts.
//!
//! - **Campaign** is a fair `lock` of the name: candidates are elected in
//!   arrival order, a resignation hands the lock to the next in line and
//!   wakes only it, a crashed leader's lock expires after the TTL and the
//!   first candidate, timed to that expiry, takes it. The term is the
//!   lock's fencing token. The new leader then writes its record
//!   (`PROCLAIM`, only while its token is the lock's), and `campaign`
//!   returns once it is written.
//! - **The record** lives as long as the lock: renewed every TTL/3 while
//!   the lock is the leader's, removed when the leadership ends (after the
//!   lock was released, so that no proclaim lands after the removal) or is
//!   seen lost.
//! - **Observers** read the lock and the record in one script (a leader
//!   iff the record's term is the lock's token) and follow the channel,
//!   with versions that keep them from going back (see `protocol.rs`).
//!   `observe` opens one subscriber connection per watch.
//!
//! Layout: `protocol.rs` (names, formats, scripts, versions; pure) ←
//! `record.rs` (a leader's record) and `watch.rs` (reads and observers) ←
//! this file.

mod protocol;
mod record;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use self::protocol::ElectionKeys;
use self::record::RedisRecord;
use crate::election::leadership::Office;
use crate::redis::protocol::keys::LockKeys;
use crate::redis::state::Core;
use crate::util::backoff::Backoff;
use crate::{Context, Elector, Key, Leader, LeaderWatch, Leadership, Locker, Result};

/// Leader election on Redis: one instance, a Redis Cluster or the master
/// behind sentinels (Redlock refuses it: independent masters have no one
/// line of candidates).
///
/// An election `name` is the fair lock `name` of the same prefix: its
/// leader holds the lock, its candidates wait in the lock's queue
/// (`fairlock status` shows them), and the term is the lock's fencing
/// token. Give elections names that no plain lock uses. What Redis cannot
/// promise (a failover may lose the lock, and so the leadership, see the
/// [backend's docs](super)) holds for elections too: fence the leader's
/// writes with [`Leadership::fencing_token`].
///
/// Cheap to clone; clones share the connections.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> fairlock::Result<()> {
/// use fairlock::{Context, Elector, Key};
/// use fairlock::redis::{RedisConfig, RedisLocker};
///
/// let locker = RedisLocker::connect(RedisConfig::new(["redis://127.0.0.1:6379"]), true).await?;
/// let elector = locker.elector();
/// let leadership = elector
///     .campaign(&Context::background(), &Key::from("scheduler"), b"10.0.0.7:8080")
///     .await?;
/// // ... lead, fencing writes with leadership.fencing_token() ...
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisElector {
    /// A fair locker: the campaigns' lock.
    locker: Arc<dyn Locker>,
    /// That locker's connections and configuration.
    core: Arc<Core>,
}

impl RedisElector {
    /// The elector whose campaigns go through `locker`, a fair locker on
    /// `core` (made by `RedisLocker::elector`).
    pub(crate) fn new(locker: Arc<dyn Locker>, core: Arc<Core>) -> Self {
        RedisElector { locker, core }
    }

    fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// The election's names, once `name` and the deployment are checked.
    fn keys(&self, name: &Key) -> Result<ElectionKeys> {
        name.validate()?;
        self.core().check_single("leader elections")?;
        let core = self.core();
        core.nodes.layout.check(name)?;
        let keys = LockKeys::new(core.nodes.layout, core.config.prefix(), name);
        Ok(ElectionKeys::new(&keys))
    }
}

#[async_trait]
impl Elector for RedisElector {
    async fn campaign(&self, ctx: &Context, name: &Key, value: &[u8]) -> Result<Leadership> {
        let keys = self.keys(name)?;
        let office = Office {
            patience: 2 * self.core.config.node_timeout(),
            backoff: Backoff::new(Duration::from_millis(20), self.core.poll()),
            resign_within: 2 * self.core.config.node_timeout(),
        };
        let lock = self.locker.lock(ctx, name);
        Leadership::campaign((ctx, name, value), lock, office, |guard, owner| {
            let term = (name.clone(), guard.fencing_token());
            let core = Arc::clone(self.core());
            Ok(Box::new(RedisRecord::new(
                core,
                keys,
                term,
                owner,
                guard.lost_token(),
            )))
        })
        .await
    }

    async fn leader(&self, name: &Key) -> Result<Option<Leader>> {
        let keys = self.keys(name)?;
        Ok(watch::read(self.core(), name, &keys).await?.leader)
    }

    async fn observe(&self, name: &Key) -> Result<LeaderWatch> {
        let keys = self.keys(name)?;
        watch::observe(Arc::clone(self.core()), name.clone(), keys).await
    }
}
