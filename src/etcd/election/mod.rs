//! Leader election on etcd: [`EtcdElector`](crate::etcd::EtcdElector).
//!
//! An election is a fair lock on its name (`lock/`), so candidates are
//! elected in arrival order with one etcd write per handoff, and a
//! leadership is lost exactly when its lock is. The leader's value lives
//! in one more key of the lock, written under the lock's fence; its keys
//! and txns are in `protocol/election.rs`, specified in the "Leader
//! election" section of `protocol/mod.rs`.
//!
//! From the bottom up: each file uses only files listed before it.
//! - `record.rs`: a leader's record (proclaim, retract);
//! - `watch.rs`: who leads, and following every change;
//! - `elector.rs`: [`EtcdElector`](crate::etcd::EtcdElector), campaign.

pub(crate) mod elector;
pub(crate) mod record;
pub(crate) mod watch;
