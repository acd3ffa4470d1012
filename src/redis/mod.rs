//! The Redis backend: one instance, Redlock over several independent
//! masters, a Redis Cluster, or a master behind Redis Sentinel (feature
//! `redis`, on by default). Valkey works the same (tested with 8.0).
//!
//! # How a lock works here
//! The lock key `<prefix><key>` holds `"<token> <owner>"`, written with
//! `SET ... PX ttl` by a script that takes it only if it is free; the owner
//! value is unique per attempt, and release, extend and every other change
//! compare it first, so no client ever deletes or extends another holder's
//! key. The token comes from `INCR` on a counter per prefix in the same
//! script: it grows with every grant, like etcd's revision, up to 2^53
//! (where Lua's numbers, doubles, stop counting exactly). A watchdog
//! extends held locks every TTL/3 and marks the guard lost when it cannot
//! (see [`crate::LockGuard::is_held`]).
//!
//! Waiters queue in a sorted set `<prefix><key>/_OWNERS_/queue` in arrival
//! order, each with a record that expires three polls (`3 x min(TTL/3,
//! 1 s)`) after the waiter last refreshed it, so a dead waiter is skipped;
//! the queue expires twice that long after the last refresh of any waiter,
//! so dead entries never keep it. A release hands the lock to the first
//! fair waiter in the same script (or frees it and wakes the first unfair
//! one), and publishes that waiter's id on the channel of the connection it
//! waits on: one release wakes one waiter, by pub/sub, not by polling. A
//! handoff is granted for the life of a waiter record only; the waiter's
//! confirming acquire renews it to the full TTL, so a waiter that died
//! since its last refresh blocks the lock for a few seconds, not a TTL.
//! Waiters also re-check every `min(TTL/3, 1 s)` (and when the holder's key
//! is due to expire), in case a message was lost.
//!
//! # Data fairlock did not write
//! Anything under the prefix may have been written by someone else. A
//! lock value that does not parse is someone else's lock (`try_lock`
//! answers `Ok(None)`, `lock` waits; without a TTL it never expires). Queue
//! members whose waiter record fairlock did not write (not a string, does
//! not parse, never expires) or scored above 2^52 are skipped and dropped
//! from the queue, so they neither get the lock nor block it. A lock or queue key of another type, or a fencing counter that
//! cannot count (not a decimal, or at 2^53), fails `lock` and `try_lock` at once with an error naming
//! the key and the `redis-cli DEL` that removes it; unlock and the
//! watchdog treat such a lock key as someone else's (the lock is lost) and
//! such a queue as empty. [`RedisLocker::status`] lists all of these in
//! [`crate::LockStatus::foreign`].
//!
//! # Read/write locks and semaphores
//! On one instance, a cluster or sentinels (not on Redlock, which has no
//! single arrival order), a key used as a read/write lock or semaphore has
//! a line: a sorted set of entries in arrival order, each with a record
//! that says what it asks for and, once granted, its fencing token (from
//! the same counter as the mutex's). The Lua scripts walk the line from
//! its head by the rule of [`crate::Locker::read_lock`]: a departure's own
//! script grants whom it admits (readers at the head together) and wakes
//! only them. Holders' records are extended by a watchdog; a dead holder's
//! record expires after the TTL and the waiters behind it, timed to that
//! expiry, drop it. A key is never a mutex and a line at once (either is
//! refused with [`crate::Error::InvalidKey`] while the other exists).
//! `line.rs` specifies it.
//!
//! # Leader election
//! On one instance, a cluster or sentinels (not on Redlock), an election
//! is the fair lock of its name plus the leader's record beside it,
//! written only while the lock is the leader's, renewed with it, and
//! announced on a channel at every change; observers read the lock and
//! the record in one script and follow the channel, ordering what they
//! read and hear by version so that they never go back
//! ([`RedisElector`], `election/protocol.rs` specifies it).
//!
//! # Redlock
//! With several URLs, a lock is taken on all masters at once (each request
//! bounded by the per-node timeout) and held if a majority granted it
//! within its validity time, `ttl - elapsed - (ttl * drift_factor + 2 ms)`;
//! (and its local deadline, which also subtracts a margin of TTL/10, at
//! most 1 s, is still ahead); otherwise it is released on every node that
//! did not answer "busy" (a node that timed out may apply the acquire late)
//! and retried after a random pause.
//! The fencing token is the highest counter among the granting nodes; when
//! fewer than a majority gave that very number, their counters are raised
//! to it (while the lock is still held there) before the lock counts as
//! taken, so the next holder's majority sees a higher counter. Extends and
//! releases also need a majority. "Held by another" (`try_lock` answers
//! `Ok(None)`, `lock` waits) is told apart from "too few nodes answered"
//! ([`crate::Error::Unavailable`], naming how many answered of how many
//! needed).
//!
//! **Fair mode is refused on Redlock** ([`crate::Error::Unsupported`]): a
//! FIFO queue on N independent masters has no single arrival order (two
//! waiters enqueue in different orders on different nodes, and no waiter
//! need head the queue on a majority) without a consensus protocol. Use one
//! Redis instance or etcd for fair locks.
//!
//! # Failovers and lost data
//! Redis acknowledges writes before they reach disk or a replica. What
//! fairlock does about it (`durability.rs`, `epoch.rs`):
//! - **A grant or extend counts once the replicas have it**: behind
//!   sentinels and on a cluster, every grant and extend is followed by
//!   `WAIT` for the replicas the deployment lists as up
//!   ([`ReplicaAcks`], `replicas.rs`); one that falls short does not count
//!   (a grant is given back, an extend does not move the deadline), so a
//!   holder is told before a promoted replica can let its lock expire.
//! - **Failovers are followed as announced** (`sentinel.rs`): answers that
//!   arrive after the sentinels' `+switch-master` do not count.
//! - **A dataset that lost fairlock's data** (a restart without
//!   persistence, a flush, a failover to a replica without it) grants
//!   nothing for the data loss wait, and its tokens count on from a new
//!   epoch (a server time in microseconds), so they never go back.
//!
//! What remains: **clocks** (Redis expires keys by its own clock, and
//! Redlock's validity assumes that clocks of all parties run at about the
//! same rate and that pauses are shorter than the TTL; etcd's leases depend
//! less on either), holders paused past their TTL, and failovers with
//! [`ReplicaAcks::Off`]. **Fencing tokens** are the remedy on every backend:
//! pass [`crate::LockGuard::fencing_token`] to the resource.
//!
//! The scripts avoid commands added in Redis 6 or later (`SET ... KEEPTTL`
//! in particular is replaced by `PTTL` and `PX`); the tests run against
//! Redis 7 and Valkey 8, so older versions are untested.
//!
//! # Redis Cluster
//! `redis+cluster://h1:7000,h2:7001` (or [`RedisConfig::cluster`]) names a
//! cluster by seed nodes. Every key of one lock carries the hash tag
//! `{<key>}` (`<prefix>{<key>}`, `<prefix>{<key>}/_OWNERS_/queue`, ...), so
//! the scripts, which touch several of them, run on the master of that one
//! slot; the fencing counter is one per lock key in the same slot
//! (`<prefix>{<key>}/_OWNERS_/fence`), so tokens grow strictly per key, as
//! on every backend. The `redis` crate's cluster connection routes each
//! script and follows `MOVED` and `ASK` (resharding, failover). Wake-ups
//! use plain `PUBLISH`/`SUBSCRIBE`, which a cluster delivers to every node:
//! one subscriber connection per locker set, to any node, that needs no
//! change when slots move; sharded pub/sub (`SPUBLISH`, Redis 7) would
//! spare the other nodes the message but need a subscription per lock's
//! slot, moved with it. A message goes out only on a release that serves
//! a waiter, not on an uncontended cycle.
//!
//! # Redis Sentinel
//! `redis+sentinel://s1:26379,s2:26379/mymaster` (or
//! [`RedisConfig::sentinel`]) names the master that the sentinels monitor
//! as `mymaster`. The master is found through the sentinels and found
//! again when they announce a failover or a request shows it gone or
//! demoted (`sentinel.rs`); the wake-up subscriber follows it too. A lock
//! held across a failover is kept if the new master has its key (the
//! watchdog's extend then succeeds there, and the replicas acknowledged
//! it, so it does); otherwise the guard is told it is lost.
//!
//! # Keys left behind
//! A free lock with nobody waiting has no keys; the keys that outlive the
//! locks are the prefix's fencing counter `<prefix>_OWNERS_/fence` (a
//! token must never repeat, so it is never deleted) and its epoch
//! `<prefix>_OWNERS_/epoch`; on a cluster one counter per lock key,
//! `<prefix>{<key>}/_OWNERS_/fence`, and one epoch per hash slot,
//! `<prefix>_OWNERS_/epoch/{<n>}`.
//!
//! # Layout
//! A folder per concern, each importing only from the ones listed before
//! it, except `state.rs`, which imports the watchdogs' starter from
//! `lock/deferred.rs`:
//! - `config/`: `url.rs` (checking URLs, redacting passwords),
//!   `topology.rs` ([`Deployment`], [`ReplicaAcks`], cluster and sentinel
//!   URLs), `redis_config.rs` ([`RedisConfig`]), `deployments.rs` (its
//!   cluster and sentinel constructors), `url_options.rs` and
//!   `durability.rs` (replica acknowledgements, the data loss wait),
//!   `validate.rs`.
//! - `protocol/`: what is written to Redis. `keys.rs` (every key name and
//!   value format, flat or hash-tagged on a cluster), `lock_lua.rs` and
//!   `lock_args.rs` (the mutex's scripts, their `ARGV`), `line.rs` and
//!   `line_lua.rs` (the line of a read/write lock or semaphore: spec,
//!   keys, replies, scripts), `epoch.rs` (the dataset epoch), `slots.rs`
//!   (a cluster's hash slots).
//! - `connect/`: reaching the servers. `node_error.rs` (one failed request,
//!   classified by error kind and code), `failed_op.rs` (an operation too
//!   few nodes answered, mapped into [`crate::Error`]), `secure.rs` and
//!   `connect_error.rs` (the client of one URL, what a failed connect
//!   says), `lanes.rs` (a node's two connections),
//!   `sentinel.rs` and `listing.rs` (the master behind sentinels, found
//!   again at once after a failover), `link.rs` (a node's connection by
//!   deployment), `replicas.rs` (how many replicas a write must reach),
//!   `wake.rs` (wake-ups by pub/sub), `node.rs` (the masters, the one
//!   request helper, fan-out).
//! - `state.rs`: what a locker's calls share (nodes, configuration, mode,
//!   id, the watchdogs' starter, the renewal timing); `pace.rs`: a
//!   waiter's pauses between rounds, the mutex's and the line's alike.
//! - `lock/`: the mutex. `deferred.rs` (watchdogs started when their first
//!   extend is due), `held_lock.rs` (a held lock: its extend on every
//!   node, its release), `attempt.rs` (one `lock`/`try_lock` call: a round
//!   on every node decided by quorum, and what leaving the queue sends).
//! - `line/`: read/write locks and semaphores. `held_entry.rs` (a held
//!   entry: its extend, its release), `in_line.rs` (one call: entering
//!   the line, waiting in it, and what leaving it sends).
//!
//! What every backend does alike is above this folder: the checks and the
//! mixed use of a key (`semantics/dispatch.rs`, over [`RedisLocker`]'s
//! `LockServer`), leaving on cancel and drop (`semantics/armed.rs`), and
//! the renewal loop that declares a holding lost (`semantics/renew.rs`).
//! - `election/`: [`RedisElector`]: its protocol, a leader's record,
//!   observers.
//! - `hand_cycle.rs` (the bench's floor row, not API), `redis_locker.rs`
//!   ([`RedisLocker`], connect, the wait loop of `lock`), `status.rs`
//!   ([`RedisLocker::status`]).

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
    pub(crate) mod lock_args;
    pub(crate) mod lock_lua;
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
// The mutex: one call's rounds, the held lock and its watchdog.
mod lock {
    pub(crate) mod attempt;
    pub(crate) mod deferred;
    pub(crate) mod held_lock;
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
