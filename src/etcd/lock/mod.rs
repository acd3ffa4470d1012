//! The lock: [`EtcdLocker`](crate::etcd::EtcdLocker), and everything one
//! call of `lock`, `try_lock` or `unlock` does.
//!
//! From the bottom up: each file uses only files listed before it.
//! - `held_lock.rs`: a held lock, the waiters behind it, the loss watch;
//! - `release.rs`: unlock, handing the lock key to the next waiter;
//! - `cleanup.rs`: removing what an abandoned attempt wrote;
//! - `attempt.rs`: one call to `lock` or `try_lock` and its writes;
//! - `listen.rs`: what a queued waiter listens to; `queue.rs`: the wait
//!   in line, one state machine, and the waiter's re-reads of the queue
//!   that it drives;
//! - `etcd_locker.rs`: [`EtcdLocker`](crate::etcd::EtcdLocker); `all_keys.rs`:
//!   its `lock_all` and `try_lock_all`; `fence.rs`:
//!   [`FencedTxn`](crate::etcd::FencedTxn); `status.rs`:
//!   [`EtcdLocker::status`](crate::etcd::EtcdLocker::status).

pub(crate) mod all_keys;
pub(crate) mod attempt;
pub(crate) mod cleanup;
pub(crate) mod etcd_locker;
pub(crate) mod fence;
pub(crate) mod held_lock;
pub(crate) mod listen;
pub(crate) mod queue;
pub(crate) mod release;
pub(crate) mod status;
