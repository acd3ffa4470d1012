//! Writing a backend: what a [`Locker`] outside this crate needs.
//!
//! An application needs nothing from this module: it picks a backend
//! ([`crate::etcd`], [`crate::redis`], [`crate::memory`]) and uses
//! [`Locker`] and [`LockGuard`]. A backend of its own implements
//! [`Locker`] (with `#[async_trait::async_trait]`) and hands out guards
//! built from the parts here.
//!
//! # Building a guard
//! 1. Put what releasing one held lock takes (a connection, the key, the
//!    value that proves ownership) into a type implementing
//!    [`GuardRelease`]. Its `release` runs at most once: from
//!    [`LockGuard::unlock`], whose caller sees its error, or in the
//!    background when the guard is dropped.
//! 2. Build the guard with [`LockGuard::new`]`(key, fencing_token,
//!    Box::new(release))`. The fencing token must grow strictly with every
//!    new holder of the key: resources compare it to refuse a stale
//!    holder's writes.
//! 3. If the lock is held through a lease, tie the guard to it with
//!    [`LockGuard::with_loss_signal`]: a `CancellationToken` the backend
//!    cancels when it learns the lock is gone, and an [`Expiry`], the
//!    lease's deadline on this machine's monotonic clock, which the backend
//!    moves forward ([`Expiry::extend_to`]) each time the server
//!    acknowledges a renewal: to when the renewal was *sent*, plus the TTL,
//!    minus a margin. [`LockGuard::is_held`] and [`LockGuard::lost`]
//!    answer from these two. A guard built without them is never reported
//!    lost.
//! 4. A loss the deadline cannot see (the lock's record deleted or
//!    overwritten by someone else) is for
//!    [`GuardRelease::watch_for_loss`], started the first time the guard's
//!    owner asks for the loss signal.
//! 5. [`GuardRelease::loss_cause`] tells why, once the backend knows
//!    (a [`crate::LossCause`]); without it [`LockGuard::loss_cause`] says
//!    `Expired` when the deadline passed and `Unspecified` otherwise.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use fairlock::provider::{Expiry, GuardRelease};
//! use fairlock::{CancellationToken, Key, LockGuard};
//!
//! /// Releases one lock of a toy backend.
//! struct Release {
//!     key: Key,
//! }
//!
//! #[async_trait::async_trait]
//! impl GuardRelease for Release {
//!     async fn release(self: Box<Self>) -> fairlock::Result<()> {
//!         println!("released {}", self.key);
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> fairlock::Result<()> {
//! let key = Key::from("jobs/export");
//! let lease = Expiry::new(Instant::now() + Duration::from_secs(10));
//! let guard = LockGuard::new(key.clone(), 7, Box::new(Release { key }))
//!     .with_loss_signal(CancellationToken::new(), Some(lease.clone()));
//! assert!(guard.is_held());
//! lease.expire(); // the backend gave up renewing
//! assert!(!guard.is_held());
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! # Registering it
//! [`crate::register_locker_provider`] takes a function from "fair?" to a
//! new locker, and [`crate::get_locker`] calls it; a [`Registry`] is such a
//! slot of one's own (for tests, or a library that must not touch the
//! process-wide one), holding a [`LockerProvider`].
//!
//! # Elections
//! A backend with elections implements [`crate::Elector`]: its
//! `campaign` takes a fair lock on the election's name and builds a
//! [`crate::Leadership`] from the guard and a [`LeaderRecord`] of its own
//! (where the leader's value goes); `observe` hands out a
//! [`crate::LeaderWatch`] fed by a task of its own. Register it with
//! [`crate::register_elector_provider`] ([`ElectorProvider`]) after its
//! locker provider.
//!
//! # Records
//! Keys never have a `/`-separated segment equal to [`RESERVED_SEGMENT`]
//! ([`crate::Key::validate`] refuses them), so a backend can keep its own
//! records (waiter queues, counters) under `<key>/_OWNERS_/` without
//! meeting a lock's name. The backends of this crate write who asked for a
//! lock as an [`Owner`] value, which their status reports parse back.

#[cfg(doc)]
use crate::{LockGuard, Locker};

pub use crate::api::expiry::Expiry;
pub use crate::api::guard::GuardRelease;
pub use crate::api::key::RESERVED_SEGMENT;
pub use crate::api::owner::Owner;
pub use crate::connect::registry::{ElectorProvider, LockerProvider, Registry};
pub use crate::election::leadership::LeaderRecord;
