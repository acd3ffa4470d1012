//! The Redis backend: one instance, Redlock over several independent
//! masters, a Redis Cluster, or a master behind Redis Sentinel (feature
//! `redis`, on by default). Valkey works the same (tested with 8.0).
//!
//! # Deployments
//! - One URL, `redis://[user:password@]host[:port][/db]` (`rediss://` for
//!   TLS): every primitive, fair and unfair.
//! - Several URLs: **Redlock**, a lock held when a majority of independent
//!   masters grant it within its validity time. Unfair mutexes only: fair
//!   mode, read/write locks, semaphores and elections need one arrival
//!   order, and `lock_all` one atomic step, which independent masters do
//!   not have ([`crate::Error::Unsupported`]).
//! - `redis+cluster://h1:7000,h2:7001` ([`RedisConfig::cluster`]): every
//!   key of one lock carries the hash tag `{<key>}`, so its scripts run on
//!   the master of one slot. `lock_all` takes keys of one slot only: keys
//!   that start with a common hash tag, `{orders}/17` and `{orders}/42`.
//! - `redis+sentinel://s1:26379,s2:26379/mymaster`
//!   ([`RedisConfig::sentinel`]): the master is found through the
//!   sentinels and followed across failovers.
//!
//! # What it promises
//! A lock key holds `"<token> <owner>"` and is changed only by scripts
//! that compare the owner first; waiters queue in arrival order and a
//! release hands the lock to the next one in the same script, waking it by
//! pub/sub. A watchdog extends held locks every TTL/3 and tells the guard
//! when it cannot ([`crate::LockGuard::is_held`], [`crate::LockGuard::lost`]).
//! Behind sentinels and on a cluster a grant or extend counts only once the
//! replicas have it ([`ReplicaAcks`]), and a dataset that lost fairlock's
//! data grants nothing for a while, so a failover or restart does not hand
//! one lock to two holders. What no lease can promise (clocks, a holder
//! paused past its TTL) is fenced with [`crate::LockGuard::fencing_token`].
//! Keys under the prefix that fairlock did not write are not taken for
//! its own: a lock value that does not parse is someone else's lock, a
//! queue member without fairlock's record is skipped, and a key of another
//! type fails `lock` with the `redis-cli DEL` that removes it;
//! [`RedisLocker::status`] lists them in [`crate::LockStatus::foreign`]. The repository's `docs/design.md` ("On
//! Redis") explains the scripts, `docs/redis.md` the failovers, measured,
//! and `docs/production.md` the keys that outlive the locks (the fencing
//! counter and the dataset's epoch).
//!
//! # Layout
//! A folder per concern, each importing only from the ones before it (but
//! `state.rs`, which imports the watchdogs' starter from
//! `lock/deferred.rs`): `config/`, then `protocol/` (every key name, value
//! format and Lua script, with its spec), `connect/`, `state.rs` (what a
//! locker's calls share) and `pace.rs` (a waiter's pauses), `lock/` (the
//! mutex), `line/` (read/write locks and semaphores), `election/`, and
//! `redis_locker.rs` ([`RedisLocker`], connect, the wait loop of `lock`)
//! and `status.rs`. What every backend does alike is above this folder,
//! in `semantics/`.

// Configuration: URLs, deployments, replica acknowledgements.
mod config {
    pub(crate) mod deployments;
    pub(crate) mod durability;
    pub(crate) mod redis_config;
    pub(crate) mod topology;
    pub(crate) mod url;
    pub(crate) mod url_options;
    pub(crate) mod validate;
}
// What is written to Redis: key names, value formats, Lua.
mod protocol {
    pub(crate) mod epoch;
    pub(crate) mod keys;
    pub(crate) mod line;
    pub(crate) mod line_lua;
    pub(crate) mod lock_all_lua;
    pub(crate) mod lock_args;
    pub(crate) mod lock_lua;
    pub(crate) mod release_all_lua;
    pub(crate) mod slots;
}
// Reaching the servers: connections, sentinels, replicas, wake-ups.
mod connect {
    pub(crate) mod connect_error;
    pub(crate) mod failed_op;
    pub(crate) mod lanes;
    pub(crate) mod link;
    pub(crate) mod listing;
    pub(crate) mod node;
    pub(crate) mod node_error;
    pub(crate) mod replicas;
    pub(crate) mod secure;
    pub(crate) mod sentinel;
    pub(crate) mod wake;
}
// The mutex: one call's rounds, the held lock and its watchdog, and
// several mutexes in one step (`lock_all`).
mod lock {
    pub(crate) mod all_keys;
    pub(crate) mod attempt;
    pub(crate) mod deferred;
    pub(crate) mod held_lock;
    pub(crate) mod take_all;
}
// Read/write locks and semaphores: one line call, a held entry.
mod line {
    pub(crate) mod held_entry;
    pub(crate) mod in_line;
}
mod election;
mod hand_cycle;
mod pace;
mod redis_locker;
mod state;
mod status;

use std::sync::Arc;

/// Who asked for a lock, as [`crate::LockStatus`] shows it.
pub use crate::Owner;
pub use config::redis_config::{
    DEFAULT_DRIFT_FACTOR, DEFAULT_PREFIX, MAX_TTL, MIN_TTL, RedisConfig,
};
pub use config::topology::{Deployment, ReplicaAcks};
pub use election::RedisElector;
#[doc(hidden)]
pub use hand_cycle::HandCycle;
pub use redis_locker::RedisLocker;

use crate::semantics::fairness::Fairness;
use crate::{Locker, Result};

/// Connects to Redis and registers it as the process-wide locker provider:
/// every [`crate::get_locker`] call then returns a new [`RedisLocker`]
/// sharing these connections, and [`crate::get_elector`] a
/// [`RedisElector`] on them.
///
/// On Redlock (several URLs) `get_locker(true)` returns a locker whose
/// every call fails with [`crate::Error::Unsupported`]: fair mode needs a
/// single instance.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> fairlock::Result<()> {
/// use fairlock::redis::RedisConfig;
/// fairlock::redis::register(RedisConfig::new(["redis://127.0.0.1:6379"])).await?;
/// let locker = fairlock::get_locker(true)?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`crate::Error::InvalidConfig`] for a bad configuration;
/// [`crate::Error::Connect`] when fewer than a quorum of nodes answer within
/// the connect timeout.
///
/// # Cancel safety
/// Cancel safe: nothing is registered until the connections are up.
pub async fn register(config: RedisConfig) -> Result<()> {
    let config = config.with_url_options()?;
    let nodes = connect::node::Nodes::connect(&config).await?;
    let locker =
        move |fairness| RedisLocker::from_nodes(Arc::clone(&nodes), config.clone(), fairness);
    let elector = locker.clone();
    crate::register_locker_provider(move |fair| {
        Arc::new(locker(Fairness::from_fair(fair))) as Arc<dyn Locker>
    });
    crate::register_elector_provider(move || {
        Arc::new(elector(Fairness::Fair).elector()) as Arc<dyn crate::Elector>
    });
    Ok(())
}
