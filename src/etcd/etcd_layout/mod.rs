//! etcd's own layout ([`Layout::Etcd`](crate::etcd::Layout::Etcd)): fair
//! locks on the keys of etcd's Go recipes, so that a fairlock process,
//! `etcdctl lock`, Go's `concurrency.Mutex` and etcd's lock service queue
//! in one line on one name. `protocol/etcd_layout.rs` is its
//! specification: the keys, the txns and why they exclude every peer.
//!
//! From the bottom up; each file uses only the files listed before it:
//! - `leases.rs`: the lease each contender's key is bound to (one key
//!   per lease and name, so a second call on a name this locker already
//!   contends for gets a lease of its own);
//! - `held.rs`: a held lock: its release and the watch that tells its
//!   holder the lock was lost;
//! - `contender.rs`: one call: its key, its writes, and what giving up
//!   (an error, a cancel, a drop) takes back;
//! - `wait.rs`: waiting until no contender created before ours is left;
//! - `calls.rs`: `lock` and `try_lock`, retried while etcd fails in ways
//!   that may pass;
//! - `status.rs`: who holds each name and who waits, whoever they are;
//! - `elect.rs`: elections: a campaign is a lock whose key holds the
//!   proposal; the leader's record, `leader` and `observe`.

pub(crate) mod calls;
mod contender;
pub(crate) mod elect;
pub(crate) mod held;
mod leases;
pub(crate) mod status;
mod wait;
