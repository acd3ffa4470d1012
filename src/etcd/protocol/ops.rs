//! The parts every transaction of the protocol is built from, and the
//! reader of their answers.

use etcd_client::{
    Compare, CompareOp, GetOptions, GetResponse, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};

use super::keys::LockKeys;

/// A txn that is safe to send twice: a read, or a write whose compares
/// make a second or late copy fail harmlessly. Only these are sent hedged
/// (a second copy when the first is slow to answer: see
/// `LockerState::send`); only this module makes them, and each function
/// that returns one says why it is safe.
pub(crate) struct Repeatable(Txn);

impl Repeatable {
    /// A read-only txn: reading twice changes nothing.
    pub(super) fn read(txn: Txn) -> Self {
        Repeatable(txn)
    }

    /// A write whose compares fail on a second copy (see the caller's
    /// reason).
    pub(super) fn write(txn: Txn) -> Self {
        Repeatable(txn)
    }

    pub(crate) fn into_txn(self) -> Txn {
        self.0
    }
}

/// `put key value` bound to `lease`.
pub(crate) fn put_leased(key: &[u8], value: &[u8], lease: i64) -> TxnOp {
    TxnOp::put(
        key.to_vec(),
        value.to_vec(),
        Some(PutOptions::new().with_lease(lease)),
    )
}

/// Marks a waiter's queue key modified (its value and lease unchanged): the
/// grant or wake signal its locker watches for.
pub(crate) fn touch(queue_key: &[u8]) -> TxnOp {
    TxnOp::put(
        queue_key.to_vec(),
        Vec::new(),
        Some(PutOptions::new().with_ignore_value().with_ignore_lease()),
    )
}

/// The `i`-th op response of a txn, if it was a range.
pub(crate) fn range_at(resp: &TxnResponse, i: usize) -> Option<GetResponse> {
    match resp.op_responses().into_iter().nth(i)? {
        TxnOpResponse::Get(get) => Some(get),
        _ => None,
    }
}

/// The lock key `lock` is still the one its holder was granted at
/// revision `token` (its mod revision: every grant and every handoff
/// writes the lock key): "still ours", the compare of every write a
/// holder makes (release, clear, fence), so that none touches a newer
/// holder's key.
pub(crate) fn still_held(lock: &[u8], token: i64) -> Compare {
    Compare::mod_revision(lock.to_vec(), CompareOp::Equal, token)
}

/// The lock key is absent: nobody holds the lock.
pub(crate) fn lock_absent(keys: &LockKeys) -> Compare {
    Compare::create_revision(keys.lock.clone(), CompareOp::Equal, 0)
}

/// No reader, writer or permit of the same name holds or waits
/// ([`LockKeys::line`]): a key held as a read/write lock or semaphore is
/// not a free mutex (an empty range compares as a key that does not
/// exist).
pub(crate) fn no_line(keys: &LockKeys) -> Compare {
    let (start, end) = keys.line();
    Compare::create_revision(start, CompareOp::Equal, 0).with_range(end)
}

/// A count of the line's entries: what a take refused by [`no_line`]
/// reads (`take.rs`).
pub(crate) fn count_line(keys: &LockKeys) -> TxnOp {
    let (start, end) = keys.line();
    TxnOp::get(
        start,
        Some(GetOptions::new().with_range(end).with_count_only()),
    )
}
