//! Removing what a lock call left behind: the txn that cleans up after an
//! attempt that gave up, and the one that clears a holding reported lost
//! before its lease is renewed again.

use etcd_client::{Compare, CompareOp, KeyValue, Txn, TxnOp, TxnResponse};

use super::keys::LockKeys;
use super::ops::{Repeatable, range_at, still_held};

/// The cleanup of an attempt that gave up, which wrote owner value `value`
/// and, if it queued, `queue_key`: if the lock key holds its value (it was
/// granted the lock meanwhile), reads the lock key and its queue key, for
/// the release that must follow ([`read_abandon`]); if not, deletes its
/// queue key.
pub(crate) fn abandon(keys: &LockKeys, value: &[u8], queue_key: Option<&[u8]>) -> Txn {
    let mut then = vec![TxnOp::get(keys.lock.clone(), None)];
    let mut otherwise = Vec::new();
    if let Some(q) = queue_key {
        then.push(TxnOp::get(q.to_vec(), None));
        otherwise.push(TxnOp::delete(q.to_vec(), None));
    }
    Txn::new()
        .when([Compare::value(
            keys.lock.clone(),
            CompareOp::Equal,
            value.to_vec(),
        )])
        .and_then(then)
        .or_else(otherwise)
}

/// What the answer to [`abandon`] says.
pub(crate) enum Abandoned {
    /// Not granted: its queue key, if any, is deleted.
    Removed,
    /// Granted meanwhile: the lock key (its mod revision is the token) and
    /// its queue key's create revision, if it still has one.
    Granted {
        lock: KeyValue,
        queue_rev: Option<i64>,
    },
}

/// Reads the answer to [`abandon`].
pub(crate) fn read_abandon(resp: &TxnResponse) -> Abandoned {
    if !resp.succeeded() {
        return Abandoned::Removed;
    }
    let Some(lock) = range_at(resp, 0).and_then(|g| g.kvs().first().cloned()) else {
        return Abandoned::Removed;
    };
    let queue_rev = range_at(resp, 1).and_then(|g| g.kvs().first().map(|kv| kv.create_revision()));
    Abandoned::Granted { lock, queue_rev }
}

/// Deletes what a holding reported lost left: the lock key `lock`, if
/// still the one it was granted (mod revision `token`), and its queue key,
/// if still its own (create revision). Each under its own compare, so a
/// second or late copy changes nothing.
pub(crate) fn clear_holding(lock: &[u8], token: i64, queue: Option<&(Vec<u8>, i64)>) -> Repeatable {
    let mut ops = vec![TxnOp::txn(
        Txn::new()
            .when([still_held(lock, token)])
            .and_then([TxnOp::delete(lock.to_vec(), None)]),
    )];
    if let Some((queue_key, rev)) = queue {
        ops.push(TxnOp::txn(
            Txn::new()
                .when([Compare::create_revision(
                    queue_key.clone(),
                    CompareOp::Equal,
                    *rev,
                )])
                .and_then([TxnOp::delete(queue_key.clone(), None)]),
        ));
    }
    Repeatable::write(Txn::new().and_then(ops))
}
