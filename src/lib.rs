//! Distributed locks for services that run on several machines: **fair**
//! (granted in arrival order) or **unfair**, with a **fencing token** for
//! every grant and a signal when a held lock is lost, on etcd or Redis.
//!
//! ```no_run
//! use std::time::Duration;
//! use fairlock::{Context, Key};
//!
//! #[tokio::main]
//! async fn main() -> fairlock::Result<()> {
//!     // Once per process: connect to etcd (FAIRLOCK_ENDPOINTS, default
//!     // 127.0.0.1:2379) and make it the backend of get_locker.
//!     fairlock::etcd::register(fairlock::etcd::EtcdConfig::from_env()?).await?;
//!
//!     let locker = fairlock::get_locker(true)?; // true: fair
//!     let ctx = Context::background().with_timeout(Duration::from_secs(30));
//!     let guard = locker.lock(&ctx, &Key::from("nightly-export")).await?;
//!     println!("exporting with fencing token {}", guard.fencing_token());
//!     guard.unlock().await?; // reports a lock lost while held
//!     Ok(())
//! }
//! ```
//!
//! # Taking a lock
//! [`get_locker`] hands out a [`Locker`] of the backend registered for the
//! process (see [Backends](#backends)). [`Locker::lock`] waits in line
//! until the lock is granted, or until its [`Context`] is cancelled or its
//! deadline passes; [`Locker::try_lock`] takes the lock only if it is free
//! now (`Ok(None)` when someone else holds it, which is not an error). A
//! lock is named by a [`Key`], any non-empty string without a `_OWNERS_`
//! path segment.
//!
//! # Fair or unfair
//! A fair locker (`get_locker(true)`) grants in strict arrival order: a
//! waiter is never overtaken, and a release hands the lock straight to the
//! first waiter. An unfair locker (`get_locker(false)`) lets a caller that
//! finds the lock free take it ahead of the queue, which saves a handoff
//! when critical sections are short but lets a waiter starve. Fair and
//! unfair lockers on one key exclude each other. Redlock (several Redis
//! masters) is unfair only.
//!
//! # What a lease can and cannot promise
//! A lock is held through a lease that the backend renews in the
//! background, so the lock of a crashed holder frees itself after the TTL.
//! No lease makes a holder safe by itself: a holder paused (GC, swap, a VM
//! migration) or cut off for longer than the TTL loses the lock while it
//! still runs its critical section. The [`LockGuard`] tells:
//! [`LockGuard::is_held`] answers from a local monotonic deadline without a
//! request, [`LockGuard::lost`] and [`LockGuard::lost_token`] fire when the
//! lock is lost. The remedy for writes is the fencing token,
//! [`LockGuard::fencing_token`]: it grows with every new holder, so a
//! resource that refuses tokens lower than the highest it has seen refuses
//! a stale holder's writes. On etcd, [`FencedTxn`](etcd::FencedTxn) runs
//! a transaction only while the guard still holds the lock.
//!
//! # Several keys at once
//! [`Locker::lock_all`] holds every key of a list or none, in a
//! [`MultiGuard`] with a fencing token per key. Fair mode joins every
//! key's queue in one step, so all waiters of all keys share one arrival
//! order: callers naming the same keys in any order never deadlock, and
//! single-key [`Locker::lock`] calls wait in the same line.
//!
//! # Leader election
//! [`get_elector`] hands out an [`Elector`]: candidates
//! [`campaign`](Elector::campaign) for an election's name with a value and
//! are elected one at a time, in arrival order (an election is a fair
//! lock on its name). The [`Leadership`] tells its holder the moment it
//! stops leading, as a [`LockGuard`] does, carries a term that grows with
//! every new leader, [`proclaims`](Leadership::proclaim) new values fenced
//! with it and [`resigns`](Leadership::resign) to the next candidate.
//! Followers ask [`Elector::leader`] or follow every change with
//! [`Elector::observe`]. On etcd, on Redis (one instance, a cluster or
//! sentinels; Redlock refuses it) and in memory.
//!
//! # Backends
//! - [`etcd`] (feature `etcd`, default): fair and unfair, on one etcd or a
//!   cluster. Building it needs `protoc`.
//! - [`redis`] (feature `redis`, default): one Redis instance, a Redis
//!   Cluster or a master behind Sentinel (fair and unfair), or Redlock over
//!   several masters (unfair).
//! - [`memory`]: in-process, with the same semantics, for tests.
//!
//! [`register_from_env`] and [`connect_from_env`] pick etcd or Redis from
//! `FAIRLOCK_ENDPOINTS` by scheme ([`BackendConfig`]); [`TlsConfig`] sets
//! up TLS for either. A backend of one's own implements [`Locker`] with the
//! parts in [`provider`], and checks it with the suite every backend here
//! passes, `fairlock::conformance` (feature `conformance`).
//!
//! # Errors
//! One [`Error`] type. [`Error::needs_config_fix`] tells the failures
//! retrying cannot cure (bad configuration, TLS, credentials, permissions)
//! from the rest.
//!
//! # Features
//! | feature | default | what |
//! |---|---|---|
//! | `etcd` | yes | the etcd backend; its build needs `protoc` |
//! | `redis` | yes | the Redis backend |
//! | `serde` | no | `serde::Serialize` on the status types |
//! | `metrics` | no | `fairlock_*` metrics through the `metrics` facade |
//! | `cli` | no | the `fairlock` command |
//! | `conformance` | no | the conformance suite, for backend authors |
//!
//! Every lock, try-lock and unlock runs in a [`tracing`] span, with events
//! for grants, releases, retries and losses; install a subscriber to see
//! them.
//!
//! # More
//! The repository's `examples/` run against etcd: `basic` (the program
//! above), `fenced` (a write a stale holder cannot make), `ordering`
//! (processes queueing on one fair lock) and `election` (nodes elected in
//! turn, a follower watching). Its `docs/` folder explains how
//! the backends work, what they cost etcd and Redis, and how they behave
//! under faults.
// The futures of a lock call nest deeply (the Redis locker's, with its
// election and line paths): computing their layout needs more query depth
// than the default 128 on a fresh build.
#![recursion_limit = "256"]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The public API's types.
mod api {
    pub(crate) mod context;
    pub(crate) mod duration;
    pub(crate) mod error;
    pub(crate) mod expiry;
    pub(crate) mod guard;
    pub(crate) mod key;
    pub(crate) mod locker;
    pub(crate) mod loss;
    pub(crate) mod multi_guard;
    pub(crate) mod owner;
    #[cfg(feature = "serde")]
    mod serialize;
    pub(crate) mod status;
}
// Leader elections, above any backend.
mod election {
    pub(crate) mod elector;
    pub(crate) mod leader;
    pub(crate) mod leadership;
}
// Reaching a backend: configuration, endpoints, TLS, the registry.
mod connect {
    #[cfg(any(feature = "etcd", feature = "redis"))]
    pub(crate) mod access;
    #[cfg(any(feature = "etcd", feature = "redis"))]
    pub(crate) mod backend_config;
    #[cfg(any(feature = "etcd", feature = "redis"))]
    pub(crate) mod env;
    pub(crate) mod registry;
    #[cfg(any(feature = "etcd", feature = "redis"))]
    pub(crate) mod scheme;
    #[cfg(any(feature = "etcd", feature = "redis"))]
    pub(crate) mod tls;
}
// What every backend means the same way: the one `Locker` over each
// backend's `LockServer` (dispatch), the armed attempt and the race with
// the caller's context (armed), the lines' admission rule, mixed use.
mod semantics {
    pub(crate) mod admission;
    pub(crate) mod all_keys;
    pub(crate) mod armed;
    pub(crate) mod dispatch;
    pub(crate) mod fairness;
    pub(crate) mod mixed_use;
    #[cfg(feature = "redis")]
    pub(crate) mod renew;
}
// Helpers with no lock semantics of their own.
mod util {
    pub(crate) mod backoff;
    pub(crate) mod observe;
    #[cfg(any(feature = "etcd", feature = "redis"))]
    pub(crate) mod setters;
    pub(crate) mod unstoppable;
}

#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod memory;
pub mod provider;
#[cfg(feature = "redis")]
pub mod redis;

#[cfg(any(feature = "etcd", feature = "redis"))]
pub use connect::access::Access;
#[cfg(any(feature = "etcd", feature = "redis"))]
pub use connect::backend_config::BackendConfig;
#[cfg(any(feature = "etcd", feature = "redis"))]
pub use connect::env::{connect_from_env, register_from_env};

pub use api::context::Context;
pub use api::duration::parse_duration;
pub use api::error::{BoxError, Error, Result};
pub use api::guard::LockGuard;
pub use api::key::{Key, MAX_KEY_LEN};
pub use api::locker::Locker;
pub use api::loss::LossCause;
pub use api::multi_guard::MultiGuard;
pub use api::status::{LeaseId, LockHolder, LockKind, LockStatus, LockWaiter, NodeCount};
pub use connect::registry::{
    get_elector, get_locker, register_elector_provider, register_locker_provider,
};
#[cfg(any(feature = "etcd", feature = "redis"))]
pub use connect::tls::TlsConfig;
pub use election::elector::{
    BACKLOG, ChangeReceiver, ChangeSender, Closed, Elector, LeaderStream, LeaderWatch,
    leader_stream,
};
pub use election::leader::{Leader, MAX_VALUE_LEN};
pub use election::leadership::Leadership;
pub use tokio_util::sync::CancellationToken;

// The backend-author items, documented in `provider`, also stay reachable
// (hidden) at the root, where the crate's own modules name them.
#[doc(hidden)]
pub use provider::{
    ElectorProvider, Expiry, GuardRelease, LeaderRecord, LockerProvider, Owner, RESERVED_SEGMENT,
    Registry,
};

// The code blocks of the README and of the docs pages that hold
// examples, compiled and run by `cargo test --doc`.
#[cfg(all(doctest, feature = "etcd", feature = "redis"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
#[cfg(all(doctest, feature = "etcd", feature = "redis"))]
#[doc = include_str!("../docs/configuration.md")]
struct ConfigurationDoctests;
#[cfg(all(doctest, feature = "etcd", feature = "redis"))]
#[doc = include_str!("../docs/production.md")]
struct ProductionDoctests;
#[cfg(all(doctest, feature = "etcd", feature = "redis"))]
#[doc = include_str!("../docs/leases.md")]
struct LeasesDoctests;
