//! Reading the queue: the waiters behind a holder (whom a release serves)
//! and a waiter's place in line (what is ahead of it).

use etcd_client::{GetOptions, GetResponse, KeyValue, SortOrder, SortTarget, Txn, TxnOp};

use super::keys::{LockKeys, Successor, is_waiter, passed_along};
use super::ops::{Repeatable, range_at};
use crate::semantics::fairness::Fairness;

/// How many waiters one successor read returns (the successor and the ones
/// a fair grant passes along to it).
pub(crate) const LOOKAHEAD: usize = 4;

/// How many queue entries ahead one read looks at for the nearest waiter.
const AHEAD_BATCH: i64 = 8;

/// The first [`LOOKAHEAD`] queue entries in line order. Whole entries:
/// telling a waiter needs its lease, which etcd 3.7 leaves out of
/// keys-only answers (see [`is_waiter`]).
pub(crate) fn successor_query() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(LOOKAHEAD as i64)
}

/// [`successor_query`] for the entries queued after revision `after`,
/// serializable: a stale answer is caught by the compares of the release
/// it serves.
pub(crate) fn lookup_query(after: i64) -> GetOptions {
    successor_query()
        .with_min_create_revision(after + 1)
        .with_serializable()
}

/// The waiters in a queue read, in order, and the create revision of the
/// last entry read, waiter or not (entries someone else wrote are skipped,
/// never served).
pub(crate) fn successors(queue_prefix: &[u8], resp: &GetResponse) -> (Vec<Successor>, Option<i64>) {
    let waiters = resp
        .kvs()
        .iter()
        .filter(|kv| is_waiter(queue_prefix, kv.key(), kv.lease()))
        .map(|kv| Successor {
            key: kv.key().to_vec(),
            create_revision: kv.create_revision(),
            lease: kv.lease(),
            value: kv.value().to_vec(),
        })
        .collect();
    let last = resp.kvs().last().map(|kv| kv.create_revision());
    (waiters, last)
}

/// The queue entries created before revision `below`, nearest first, at
/// most [`AHEAD_BATCH`]. Whole entries, for their leases (see
/// [`successor_query`]).
pub(crate) fn ahead(below: i64) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_max_create_revision((below - 1).max(1))
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(AHEAD_BATCH)
}

/// Whether a batch read by [`ahead`] has a waiter; or, when none is and
/// the batch was full, the revision to read the next batch below.
pub(crate) fn nearest_waiter(queue_prefix: &[u8], batch: &[KeyValue]) -> Ahead {
    if batch
        .iter()
        .any(|kv| is_waiter(queue_prefix, kv.key(), kv.lease()))
    {
        return Ahead::Waiter;
    }
    match batch.last() {
        Some(oldest) if batch.len() as i64 == AHEAD_BATCH => {
            Ahead::ReadBelow(oldest.create_revision())
        }
        _ => Ahead::Nobody,
    }
}

/// What a batch of the entries ahead of a waiter shows.
pub(crate) enum Ahead {
    /// A waiter is ahead.
    Waiter,
    /// None in the batch, which was full: read the entries below this
    /// create revision.
    ReadBelow(i64),
    /// Nobody waits ahead.
    Nobody,
}

/// The read-only txn a queued waiter checks its place with: its own queue
/// key, the lock key, and the first batch of entries ahead of it.
pub(crate) fn place_check(keys: &LockKeys, queue_key: &[u8], my_rev: i64) -> Repeatable {
    Repeatable::read(Txn::new().and_then([
        TxnOp::get(queue_key.to_vec(), None),
        TxnOp::get(keys.lock.clone(), None),
        TxnOp::get(keys.queue.clone(), Some(ahead(my_rev))),
    ]))
}

/// [`place_check`] without the entries ahead: the waiter's queue key and
/// the lock key (read by [`read_place`] all the same; it answers
/// [`Place::Behind`] with no batch where [`place_check`] would look
/// ahead).
pub(crate) fn place_glance(keys: &LockKeys, queue_key: &[u8]) -> Repeatable {
    Repeatable::read(Txn::new().and_then([
        TxnOp::get(queue_key.to_vec(), None),
        TxnOp::get(keys.lock.clone(), None),
    ]))
}

/// Whether range `i` of a read-only txn's answer found no key (the lock
/// key in [`place_check`] and [`place_glance`]: the lock is free).
pub(crate) fn range_is_empty(resp: &etcd_client::TxnResponse, i: usize) -> bool {
    range_at(resp, i).is_none_or(|g| g.kvs().is_empty())
}

/// What the answer to [`place_check`] says of a waiter queued at `my_rev`
/// with owner value `value`.
pub(crate) enum Place {
    /// Its queue key is gone (its lease ended, or someone deleted it).
    Gone,
    /// The lock key holds its value: a release handed it the lock at
    /// revision `token`, with the waiters behind it `passed` along.
    Granted { token: i64, passed: Vec<Successor> },
    /// Unfair, and the lock key is free: take it from any place in line.
    FreeToBarge,
    /// Look at the entries ahead (`first_batch`, read by [`ahead`]) for the
    /// nearest waiter; with none, the lock is free for it if `lock_free`,
    /// else it waits for the lock key.
    Behind {
        first_batch: Option<GetResponse>,
        lock_free: bool,
    },
}

/// Reads the answer `resp` to [`place_check`].
pub(crate) fn read_place(
    keys: &LockKeys,
    fairness: Fairness,
    (value, my_rev): (&[u8], i64),
    resp: &etcd_client::TxnResponse,
) -> Place {
    let first = |i| range_at(resp, i).and_then(|g| g.kvs().first().cloned());
    let Some(mine) = first(0).filter(|kv| kv.create_revision() == my_rev) else {
        return Place::Gone;
    };
    let lock = first(1);
    if let Some(lock) = &lock
        && lock.value() == value
    {
        return Place::Granted {
            token: lock.mod_revision(),
            passed: passed_along(keys, value, mine.value()),
        };
    }
    if lock.is_none() && fairness == Fairness::Unfair {
        return Place::FreeToBarge;
    }
    Place::Behind {
        first_batch: range_at(resp, 2),
        lock_free: lock.is_none(),
    }
}

/// The read-only txn of a locker's vigil over a lock (`session/vigil.rs`):
/// whether the lock key exists, and the first [`LOOKAHEAD`] queue entries
/// in line order (or, with `after`, those queued after that revision).
pub(crate) fn head_check(keys: &LockKeys, after: Option<i64>) -> Repeatable {
    let entries = match after {
        Some(after) => lookup_query(after),
        None => successor_query(),
    };
    Repeatable::read(Txn::new().and_then([
        TxnOp::get(keys.lock.clone(), Some(GetOptions::new().with_keys_only())),
        TxnOp::get(keys.queue.clone(), Some(entries)),
    ]))
}

/// What the answer to [`head_check`] says.
pub(crate) enum Head {
    /// The lock key exists: someone holds the lock.
    Held,
    /// The lock key is free at revision `at`; the waiters read, in line
    /// order, and the create revision of the last entry read, if the read
    /// was full (more may follow).
    Free {
        waiters: Vec<Successor>,
        more_after: Option<i64>,
        at: i64,
    },
}

/// Reads the answer `resp` to [`head_check`].
pub(crate) fn read_head(keys: &LockKeys, resp: &etcd_client::TxnResponse) -> Head {
    if range_at(resp, 0).is_some_and(|g| !g.kvs().is_empty()) {
        return Head::Held;
    }
    let Some(batch) = range_at(resp, 1) else {
        return Head::Free {
            waiters: Vec::new(),
            more_after: None,
            at: resp.header().map_or(0, |h| h.revision()),
        };
    };
    let (waiters, last) = successors(&keys.queue, &batch);
    let full = batch.kvs().len() >= LOOKAHEAD;
    Head::Free {
        waiters,
        more_after: last.filter(|_| full),
        at: resp.header().map_or(0, |h| h.revision()),
    }
}
