//! An in-process backend with the same semantics as etcd's, for unit tests.
//!
//! A [`MemoryStore`] is the "server": lockers made from the same store (or
//! its clones) exclude each other. Nothing crosses process boundaries and
//! nothing expires: a lock is held until it is released or its guard dropped.
//!
//! # Examples
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> fairlock::Result<()> {
//! use fairlock::{Context, Key, Locker, memory::MemoryStore};
//!
//! let store = MemoryStore::new();
//! let (a, b) = (store.locker(true), store.locker(true));
//! let guard = a.lock(&Context::background(), &Key::from("k")).await?;
//! assert!(b.try_lock(&Key::from("k")).await?.is_none());
//! guard.unlock().await?;
//! assert!(b.try_lock(&Key::from("k")).await?.is_some());
//! # Ok(()) }
//! ```
//!
//! Read/write locks and semaphores ([`crate::Locker::read_lock`],
//! [`crate::Locker::acquire_permits`]) work here too, by the same rule as on etcd.
//!
//! ## Layout
//! From the bottom up: `mutex.rs` (one key's mutex: holder and fair
//! waiters), `line.rs` (one key's line of readers, writers or permits),
//! `election.rs` ([`MemoryElector`]: leaders' values and their observers,
//! over a fair locker), `store.rs` ([`MemoryStore`]: every key's, under
//! one lock), `memory_locker.rs` ([`MemoryLocker`] and the waits).

mod election;
mod line;
mod memory_locker;
mod mutex;
mod store;

pub use election::MemoryElector;
pub use memory_locker::MemoryLocker;
pub use store::MemoryStore;
