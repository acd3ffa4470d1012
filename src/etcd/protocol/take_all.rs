//! Taking several locks at once (`lock_all`, `try_lock_all`): the txns
//! that write every key of one call in one revision.
//!
//! ```text
//! enqueue all (fair)      if no line, for every key
//!                           then { enqueue (take.rs) } per key, nested:
//!                                  each key taken if free with nobody
//!                                  queued, else queued; all at one revision
//!                           else count each key's line (which is in use)
//! take all                if every key is free for a newcomer
//!   (try_lock_all, each     (L absent, no line [fair: and Q empty])
//!    try of unfair lock_all) then put L=v@l per key
//!                           else count each key's line
//! release together        if every key's release round's compares hold
//!   (MultiGuard::unlock,    then every key's round's ops (release.rs)
//!    release.rs)            else nothing: each key is released alone
//! ```
//!
//! One revision for all the entries of a call is what makes fair
//! `lock_all` deadlock-free (`crate::semantics::all_keys`): per key, the
//! queue is in create-revision order, and the entries of one call share
//! theirs, so every waiter of every key has one place in one global order.
//! Each key is then waited for and handed over as a single-key `lock` is
//! (`take.rs`, `release.rs`): a single-key waiter and a multi-key one
//! queue in one line. The release of all keys is one txn too, so a
//! waiter for the same keys is handed them all at one revision: a grant
//! of the whole call costs two revisions, its enqueue and its release. Unfair `lock_all` writes no entry: it
//! takes all keys in one txn or none, and waits on the lock keys.
//!
//! etcd refuses a txn with more than `--max-txn-ops` (128 by default)
//! compares or ops on one level: a fair `take all` compares three things
//! per key, so a call names at most [`MAX_KEYS`] keys.

use etcd_client::{Txn, TxnOp, TxnOpResponse, TxnResponse};

use super::keys::LockKeys;
use super::ops::{count_line, no_line, put_leased, range_at};
use super::take::{enqueue, free_for_newcomer};
use crate::semantics::fairness::Fairness;

/// The most keys one `lock_all` call names on etcd: `--max-txn-ops` (128
/// by default) over the three compares per key of a fair take, rounded
/// down.
pub(crate) const MAX_KEYS: usize = 32;

/// The most bytes of all the keys of one call: each is named about eight
/// times in a txn, which must stay under etcd's request limit (1.5 MiB by
/// default).
pub(crate) const MAX_KEY_BYTES: usize = 128 * 1024;

/// One key of a call: its keys and its attempt's owner value.
pub(crate) struct Part<'a> {
    pub keys: &'a LockKeys,
    pub value: &'a [u8],
    /// Its queue key (fair `lock_all` only).
    pub queue_key: &'a [u8],
}

/// The first write of a fair `lock_all`.
pub(crate) fn enqueue_all(parts: &[Part<'_>], lease: i64) -> Txn {
    let each = parts.iter().map(|p| {
        TxnOp::txn(enqueue(
            p.keys,
            Fairness::Fair,
            (p.value, lease),
            p.queue_key,
        ))
    });
    Txn::new()
        .when(parts.iter().map(|p| no_line(p.keys)).collect::<Vec<_>>())
        .and_then(each.collect::<Vec<_>>())
        .or_else(parts.iter().map(|p| count_line(p.keys)).collect::<Vec<_>>())
}

/// What the answer to [`enqueue_all`] or [`take_all`] says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AllAnswer {
    /// Per key, `true` if taken at the txn's revision (else queued at it).
    Each(Vec<bool>),
    /// Not written: this key (by its index) is in use as a read/write lock
    /// or semaphore.
    InUseAsLine(usize),
    /// Not written: some key is held or waited for (`take_all` only).
    Busy,
}

/// Reads the answer to [`enqueue_all`] for `n` keys.
pub(crate) fn read_enqueue_all(resp: &TxnResponse, n: usize) -> AllAnswer {
    if !resp.succeeded() {
        return in_use(resp, n).map_or(AllAnswer::Busy, AllAnswer::InUseAsLine);
    }
    let each = resp.op_responses().into_iter().map(|op| match op {
        TxnOpResponse::Txn(each) => each.succeeded(),
        _ => false,
    });
    AllAnswer::Each(each.collect())
}

/// `try_lock_all`'s txn, and each try of an unfair `lock_all`: every key
/// taken in one step if each is free for a newcomer, else none.
pub(crate) fn take_all(parts: &[Part<'_>], fairness: Fairness, lease: i64) -> Txn {
    let free = parts
        .iter()
        .flat_map(|p| free_for_newcomer(p.keys, fairness));
    let take = parts
        .iter()
        .map(|p| put_leased(&p.keys.lock, p.value, lease));
    Txn::new()
        .when(free.collect::<Vec<_>>())
        .and_then(take.collect::<Vec<_>>())
        .or_else(parts.iter().map(|p| count_line(p.keys)).collect::<Vec<_>>())
}

/// Reads the answer to [`take_all`] for `n` keys.
pub(crate) fn read_take_all(resp: &TxnResponse, n: usize) -> AllAnswer {
    if resp.succeeded() {
        return AllAnswer::Each(vec![true; n]);
    }
    in_use(resp, n).map_or(AllAnswer::Busy, AllAnswer::InUseAsLine)
}

/// The first key whose line count (the failure branch's reads) is not 0.
fn in_use(resp: &TxnResponse, n: usize) -> Option<usize> {
    (0..n).find(|&i| range_at(resp, i).is_some_and(|g| g.count() > 0))
}
