//! The parts every transaction of the protocol is built from, and the
//! reader of their answers.

use etcd_client::{GetResponse, PutOptions, TxnOp, TxnOpResponse, TxnResponse};

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
