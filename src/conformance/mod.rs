//! The conformance suite: the checks every backend of the [`Locker`] trait
//! passes (feature `conformance`). This crate runs it on etcd, Redis,
//! Redlock and the in-memory backend; write a backend of your own and run
//! it there too.
//!
//! # Running it on a backend
//! 1. Implement [`Backend`] for a small type of your test: how to make a
//!    locker, how to see that waiters are queued and that the store is
//!    clean, and what to check at the end ([`Backend::finish`]). Its
//!    documentation is the contract; read "right now" in
//!    [`Backend::is_clean`] closely.
//! 2. Write an `async fn(&str) -> YourBackend` that builds a fresh backend
//!    for each check (a new key prefix or store; the `&str` is a name of the
//!    check to build it from).
//! 3. Call [`conformance_tests!`](crate::conformance_tests) with it in a
//!    test file: every check becomes a `#[test]` of its own, run on its own
//!    multi-thread runtime by [`run`]. Or call the checks yourself from your
//!    own tests; each is an `async fn` taking the backend.
//!
//! Turn the feature on for your tests only:
//! ```toml
//! [dev-dependencies]
//! fairlock = { version = "0.1", features = ["conformance"] }
//! ```
//!
//! # The checks
//! Each check builds its lockers from the backend, panics when a promise is
//! broken, and ends with [`Backend::finish`]. A backend that refuses fair
//! mode ([`Backend::supports_fair`] is `false`) skips what needs it.
//! - [`mutual_exclusion`]: one holder at a time, no lost update, strictly
//!   growing fencing tokens, in fair, unfair and mixed modes.
//! - [`fair_order`]: fair waiters are granted in arrival order.
//! - [`key_isolation`]: `a`, `ab` and `a/b` are independent locks.
//! - [`a_burst_of_waiters_is_served`]: [`BURST`] `lock` calls at once from
//!   one locker are each granted once.
//! - [`try_lock`]: free, held (also to its own locker), free again.
//! - [`timeout_leaves_nothing`], [`cancel_leaves_nothing`]: a `lock` that
//!   gives up cleans up before it returns.
//! - [`drop_future_leaves_nothing`], [`drop_guard_releases`]: dropping
//!   cleans up in the background.
//! - [`bad_input`]: clear errors for bad keys and a cancelled context.
//! - [`read_write_lock`], [`semaphore`], [`shared_giving_up_leaves_nothing`],
//!   [`shared_bad_input`], [`lock_is_the_write_lock_of_a_read_key`],
//!   [`read_lock_waits_for_the_mutex`]:
//!   read/write locks and semaphores, for a backend that has them
//!   ([`Backend::supports_shared`]).
//! - [`lock_all_is_all_or_nothing`], [`lock_all_opposite_orders`],
//!   [`lock_all_overlapping_sets`], [`lock_all_keeps_arrival_order`],
//!   [`lock_all_giving_up_leaves_nothing`], [`lock_all_bad_input`]:
//!   several keys at once, for a backend that has them
//!   ([`Backend::supports_lock_all`]).
//!
//! [`patient`] is the context the checks give every `lock` that must
//! succeed. Every check is called as
//! `conformance::check(&backend, mode...).await` (see the example below),
//! and is cancel safe as [`mutual_exclusion`] tells.
//!
//! # Leader election
//! A backend with an [`Elector`](crate::Elector) also implements
//! [`ElectionBackend`] and runs
//! [`election_conformance_tests!`](crate::election_conformance_tests):
//! [`election_order`], [`one_leader_at_a_time`], [`resign_hands_over`],
//! [`proclaim_changes_the_value`], [`observers_see_every_change`],
//! [`giving_up_a_campaign_leaves_nothing`],
//! [`dropping_a_leadership_hands_over`], [`election_bad_input`]
//! (`election.rs`, `election_watch.rs`).
//!
//! # Example
//! The in-memory backend under the suite; a networked backend reads its
//! server in [`Backend::is_clean`] and waits on the server's change events
//! in the waits.
//! ```
//! use std::sync::Arc;
//!
//! use async_trait::async_trait;
//! use fairlock::conformance::{self, Backend};
//! use fairlock::memory::MemoryStore;
//! use fairlock::{Key, Locker};
//!
//! struct Memory(MemoryStore);
//!
//! /// Polls the store between scheduler turns (an in-process store has no
//! /// change events; its state changes only when other tasks run).
//! async fn until(mut done: impl FnMut() -> bool) {
//!     while !done() {
//!         tokio::task::yield_now().await;
//!     }
//! }
//!
//! #[async_trait]
//! impl Backend for Memory {
//!     fn locker(&self, fair: bool) -> Arc<dyn Locker> {
//!         Arc::new(self.0.locker(fair))
//!     }
//!     async fn wait_queued(&self, key: &Key, n: usize) {
//!         until(|| self.0.waiting(key) >= n).await;
//!     }
//!     async fn wait_clean(&self) {
//!         until(|| self.0.is_idle()).await;
//!     }
//!     async fn is_clean(&self) -> bool {
//!         self.0.is_idle()
//!     }
//!     async fn finish(&self) {
//!         assert!(self.0.is_idle(), "the store is not idle at the end");
//!     }
//! }
//!
//! async fn memory(_check: &str) -> Memory {
//!     Memory(MemoryStore::new())
//! }
//!
//! // In a test file: all the checks, one #[test] each.
//! fairlock::conformance_tests!(memory);
//!
//! // Or one check, by hand.
//! fn main() {
//!     conformance::run(async { conformance::try_lock(&memory("try").await).await });
//! }
//! ```
//!
//! # Map
//! - `backend.rs`: [`Backend`], the contract of the backend under test.
//! - `common.rs`: [`patient`] and the helpers the checks share.
//! - `exclusion.rs`: [`mutual_exclusion`], [`fair_order`], [`key_isolation`],
//!   [`a_burst_of_waiters_is_served`].
//! - `cleanup.rs`: [`timeout_leaves_nothing`], [`cancel_leaves_nothing`],
//!   [`drop_future_leaves_nothing`], [`drop_guard_releases`].
//! - `entry_points.rs`: [`try_lock`], [`bad_input`].
//! - `all_keys.rs`: the `lock_all` checks.
//! - `suite.rs`: [`run`] and the two macros.
//!
//! The checks use only this crate's own dependencies (tokio,
//! async-trait), none of its dev-dependencies.
//!
//! [`Locker`]: crate::Locker

mod all_keys;
mod backend;
mod cleanup;
mod common;
mod election;
mod election_watch;
mod entry_points;
mod exclusion;
mod lines;
mod mixed;
mod permits;
mod suite;

pub use all_keys::{
    lock_all_bad_input, lock_all_giving_up_leaves_nothing, lock_all_is_all_or_nothing,
    lock_all_keeps_arrival_order, lock_all_opposite_orders, lock_all_overlapping_sets,
};
pub use backend::Backend;
pub use cleanup::{
    cancel_leaves_nothing, drop_future_leaves_nothing, drop_guard_releases, timeout_leaves_nothing,
};
pub use common::patient;
pub use election::{
    ElectionBackend, election_order, one_leader_at_a_time, proclaim_changes_the_value,
    resign_hands_over,
};
pub use election_watch::{
    dropping_a_leadership_hands_over, election_bad_input, giving_up_a_campaign_leaves_nothing,
    observers_see_every_change,
};
pub use entry_points::{bad_input, try_lock};
pub use exclusion::{
    BURST, a_burst_of_waiters_is_served, fair_order, key_isolation, mutual_exclusion,
};
pub use lines::{read_write_lock, semaphore, shared_bad_input, shared_giving_up_leaves_nothing};
pub use mixed::{lock_is_the_write_lock_of_a_read_key, read_lock_waits_for_the_mutex};
pub use suite::run;
