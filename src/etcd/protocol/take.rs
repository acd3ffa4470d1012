//! Taking a lock: the txns of `lock` (the enqueue, and a queued waiter's
//! take of a free lock key) and of `try_lock`.

use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnResponse};

use super::keys::{LockKeys, is_waiter};
use super::ops::{Repeatable, count_line, lock_absent, no_line, put_leased, range_at};
use crate::semantics::fairness::Fairness;

/// How many queue entries a fair `try_lock` looks at when the lock is free
/// but the queue is not empty (to tell entries fairlock did not write from
/// waiters); with more, it answers "held".
const FOREIGN_SCAN: i64 = 16;

/// The compares under which a lock is free for a newcomer: the lock key
/// absent, no read/write lock or semaphore entry of the same name, and,
/// for a fair one, nobody queued. A line's entries are under the queue's
/// prefix (`_OWNERS_/r/`, `_OWNERS_/w`), so for a fair newcomer the one
/// compare "nothing under `_OWNERS_/`" checks both: the uncontended fair
/// cycle pays no compare for lines (etcd runs each compare as a range
/// read).
pub(crate) fn free_for_newcomer(keys: &LockKeys, fairness: Fairness) -> Vec<Compare> {
    match fairness {
        Fairness::Fair => vec![
            lock_absent(keys),
            Compare::create_revision(keys.queue.clone(), CompareOp::Equal, 0).with_prefix(),
        ],
        Fairness::Unfair => vec![lock_absent(keys), no_line(keys)],
    }
}

/// The first write of `lock`: take the lock if it is free for a newcomer,
/// else queue under `queue_key`. Both with owner value `value` on `lease`.
/// The txn's revision is the token when it succeeded, the queue entry's
/// create revision (its place in line) when not.
pub(crate) fn enqueue(
    keys: &LockKeys,
    fairness: Fairness,
    (value, lease): (&[u8], i64),
    queue_key: &[u8],
) -> Txn {
    Txn::new()
        .when(free_for_newcomer(keys, fairness))
        .and_then([put_leased(&keys.lock, value, lease)])
        .or_else([put_leased(queue_key, value, lease)])
}

/// The txn of a queued waiter (queue key `queue_key` created at `my_rev`)
/// that creates the lock key if it is still free and the waiter is still
/// queued; an unfair waiter also leaves the queue in it.
///
/// A fair waiter sends it only after a read (at or after its enqueue)
/// found no waiter ahead of it, and that stays true: whatever queues later
/// is behind it. So the txn needs no compare on the queue, and entries that
/// are not waiters cannot block it.
///
/// Safe to send twice: a second copy finds the lock key created (by the
/// first, or by someone else) and fails.
pub(crate) fn take(
    keys: &LockKeys,
    fairness: Fairness,
    (value, lease): (&[u8], i64),
    (queue_key, my_rev): (&[u8], i64),
) -> Repeatable {
    let when = [
        lock_absent(keys),
        Compare::create_revision(queue_key.to_vec(), CompareOp::Equal, my_rev),
        no_line(keys),
    ];
    let mut then = vec![put_leased(&keys.lock, value, lease)];
    if fairness == Fairness::Unfair {
        then.push(TxnOp::delete(queue_key.to_vec(), None));
    }
    Repeatable::write(
        Txn::new()
            .when(when)
            .and_then(then)
            .or_else([count_line(keys)]),
    )
}

/// `true` if [`take`] failed because the key is in use as a read/write
/// lock or semaphore: the waiter must not wait for it as a mutex.
pub(crate) fn take_refused_by_line(resp: &TxnResponse) -> bool {
    !resp.succeeded() && range_at(resp, 0).is_some_and(|g| g.count() > 0)
}

/// `try_lock`'s txn: take the lock if it is free for a newcomer. When a
/// fair one is not, it reads whether the lock key is free and the first
/// queue entries, to tell entries fairlock did not write (see
/// [`is_waiter`]) from waiters: [`read_try`].
pub(crate) fn try_take(keys: &LockKeys, fairness: Fairness, (value, lease): (&[u8], i64)) -> Txn {
    let reads = if fairness.is_fair() {
        vec![
            TxnOp::get(keys.lock.clone(), Some(GetOptions::new().with_count_only())),
            TxnOp::get(
                keys.queue.clone(),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Create, SortOrder::Ascend)
                        .with_limit(FOREIGN_SCAN),
                ),
            ),
        ]
    } else {
        Vec::new()
    };
    Txn::new()
        .when(free_for_newcomer(keys, fairness))
        .and_then([put_leased(&keys.lock, value, lease)])
        .or_else(reads)
}

/// What the answer to [`try_take`] says.
pub(crate) enum Tried {
    /// Taken, at the txn's revision.
    Taken,
    /// Free, and queued only by entries fairlock did not write, the newest
    /// created at this revision: [`take_past_foreign`] may take it.
    FreeBehindForeign(i64),
    /// Held, or waited for.
    Busy,
}

/// Reads the answer to [`try_take`].
pub(crate) fn read_try(keys: &LockKeys, resp: &TxnResponse) -> Tried {
    if resp.succeeded() {
        return Tried::Taken;
    }
    let free = range_at(resp, 0).is_some_and(|g| g.count() == 0);
    let queue = range_at(resp, 1);
    let only_foreign = queue.as_ref().is_some_and(|g| {
        (g.kvs().len() as i64) < FOREIGN_SCAN
            && !g
                .kvs()
                .iter()
                .any(|kv| is_waiter(&keys.queue, kv.key(), kv.lease()))
    });
    let newest = queue.and_then(|g| g.kvs().last().map(|kv| kv.create_revision()));
    match (free, only_foreign, newest) {
        (true, true, Some(newest)) => Tried::FreeBehindForeign(newest),
        _ => Tried::Busy,
    }
}

/// Takes a free lock whose queue holds only entries fairlock did not
/// write, if nothing newer than `newest` has queued since.
pub(crate) fn take_past_foreign(keys: &LockKeys, (value, lease): (&[u8], i64), newest: i64) -> Txn {
    Txn::new()
        .when([
            lock_absent(keys),
            Compare::create_revision(keys.queue.clone(), CompareOp::Less, newest + 1).with_prefix(),
            no_line(keys),
        ])
        .and_then([put_leased(&keys.lock, value, lease)])
}
