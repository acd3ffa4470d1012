//! A locker's session lease, one per locker and shared by every key it
//! holds or waits for, and the rest of what its operations share.
//!
//! From the bottom up: each file uses only files listed before it.
//! - `slots.rs`: the queue entry names a locker reuses;
//! - `lease.rs`: a session lease as the locker sees it, and the local
//!   deadline behind `LockGuard::is_held`;
//! - `renewal.rs`: a lease's keepalive task, which counts a renewal only
//!   when a read confirms it;
//! - `revival.rs`: the lock keys lost holdings leave on a lease that lapsed
//!   here, deleted before it is renewed again;
//! - `handout.rs`: the locker's current lease, handed out once a renewal
//!   counted, and revived for its waiters after it lapsed here only;
//! - `queue_heads.rs`: the waiters a locker last read at the head of
//!   each queue, for its next holders there;
//! - `vigil.rs`: a locker's one watch per lock over a lock freed with
//!   nobody to hand it on, for its waiters that waited their patience;
//! - `state.rs`: what one locker's operations share: its connection,
//!   settings, session, entry names and watches, and `send`, the one way
//!   its txns go to etcd (alone or batched; hedged if `Repeatable`);
//! - `held_key.rs`: watching a held key until it changes (the loss watch
//!   of a lock key and of a line entry).

pub(crate) mod handout;
pub(crate) mod held_key;
pub(crate) mod lease;
pub(crate) mod queue_heads;
pub(crate) mod renewal;
pub(crate) mod revival;
pub(crate) mod slots;
pub(crate) mod state;
pub(crate) mod vigil;
