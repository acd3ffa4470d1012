//! Read/write locks and semaphores on etcd ([`crate::Locker::read_lock`],
//! [`crate::Locker::acquire_permits`]): a line per key, granted in arrival order
//! by the rule of `crate::semantics::admission`; its keys and txns are specified in
//! `protocol/mod.rs` and built in `protocol/line.rs` and
//! `protocol/line_txn.rs`.
//!
//! From the bottom up: each file uses only files listed before it.
//! - `depart.rs`: a caller's entry as its join wrote it (`LineEntry`,
//!   the waiter's and the holder's), leaving the line, and telling whom
//!   that admits;
//! - `held_entry.rs`: a held entry, its release and its loss watch;
//! - `sent.rs`: the join txn on its way, left again if its caller gives
//!   up before the answer;
//! - `in_line.rs`: a caller in line: what it listens to, checking its
//!   place, leaving when it gives up;
//! - `join.rs`: one call: join, wait, give up.

pub(crate) mod depart;
pub(crate) mod held_entry;
pub(crate) mod in_line;
pub(crate) mod join;
pub(crate) mod sent;
