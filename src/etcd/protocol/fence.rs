//! Fenced writes: a txn of the holder's own, applied only while it still
//! holds the lock.

use etcd_client::{Compare, Txn, TxnOp};

use super::ops::still_held;

/// The compare that holds exactly while the holder granted lock key `lock`
/// at revision `token` holds it ([`still_held`]).
pub(crate) fn fence(lock: &[u8], token: i64) -> Compare {
    still_held(lock, token)
}

/// `txn` inside a txn guarded by `fence`: applied only while the fence
/// holds, and then answered as the only op of the outer txn's answer.
pub(crate) fn fenced(fence: Compare, txn: Txn) -> Txn {
    Txn::new().when([fence]).and_then([TxnOp::txn(txn)])
}
