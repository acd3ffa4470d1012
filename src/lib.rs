#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

//! # Map of the crate
//! - [`Locker`], [`LockGuard`]: the trait every backend implements and the
//!   guard it returns (`locker.rs`).
//! - [`register_locker_provider`], [`get_locker`], [`Registry`]: choosing a
//!   backend once per process (`registry.rs`).
//! - [`Key`], [`Context`], [`Error`]: lock names, deadlines and cancellation,
//!   errors.
//! - [`Expiry`]: a lease's local monotonic deadline, behind
//!   [`LockGuard::is_held`] (`expiry.rs`).
//! - [`Owner`]: who asked for a lock, as every backend records it
//!   (`owner.rs`); [`parse_duration`] (`duration.rs`).
//! - [`etcd`]: the etcd backend (feature `etcd`, on by default).
//! - [`redis`]: the Redis backend, one instance or Redlock over several
//!   masters (feature `redis`, on by default).
//! - [`BackendConfig`], [`register_from_env`], [`connect_from_env`]: the
//!   backend named by `FAIRLOCK_ENDPOINTS`, by scheme (`backend.rs`).
//! - [`TlsConfig`]: CA bundle, client certificate and server name for TLS
//!   connections to either backend (`tls.rs`).
//! - With feature `serde`, the status types and [`Owner`] implement
//!   `serde::Serialize` (`serialize.rs`).
//! - `observe.rs`: the tracing spans and events, and the `fairlock_*`
//!   metrics (feature `metrics`), of every backend.
//! - [`memory`]: an in-process backend with the same semantics, for tests.
//! - [`conformance`]: the checks every backend passes, for authors of new
//!   backends (feature `conformance`; `src/conformance/`).
//! - The `fairlock` command (feature `cli`, on by default) is built from
//!   `src/bin/fairlock/` on top of this API.

#[cfg(any(feature = "etcd", feature = "redis"))]
mod access;
#[cfg(any(feature = "etcd", feature = "redis"))]
mod backend;
mod backoff;
mod context;
mod duration;
mod error;
mod expiry;
mod fairness;
mod key;
mod locker;
mod observe;
mod owner;
mod registry;
#[cfg(feature = "serde")]
mod serialize;
#[cfg(any(feature = "etcd", feature = "redis"))]
mod tls;

#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;

#[cfg(any(feature = "etcd", feature = "redis"))]
pub use access::Access;
#[cfg(any(feature = "etcd", feature = "redis"))]
pub use backend::{BackendConfig, connect_from_env, register_from_env};

pub use context::Context;
pub use duration::parse_duration;
pub use error::{BoxError, Error, Result};
pub use expiry::Expiry;
pub use key::{Key, MAX_KEY_LEN, RESERVED_SEGMENT};
pub use locker::{GuardRelease, LockGuard, Locker};
pub use owner::Owner;
pub use registry::{LockerProvider, Registry, get_locker, register_locker_provider};
#[cfg(any(feature = "etcd", feature = "redis"))]
pub use tls::TlsConfig;
pub use tokio_util::sync::CancellationToken;
