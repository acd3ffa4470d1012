//! What fairlock writes to etcd and reads from it.
//!
//! - `keys.rs`: every etcd wire format: key layout, mode tags, owner
//!   values, the passed-along successor list.

pub(crate) mod keys;
