//! The txns and reads of read/write locks and semaphores (their line:
//! `line.rs`).

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp,
    TxnResponse,
};

use super::line::{Entry, LineKeys, Range};
use super::ops::{Repeatable, put_leased, range_at, touch};
use crate::semantics::admission::{Share, may_share_a_key};

/// How many entries of the line one departure reads at once.
pub(crate) const BATCH: i64 = 16;

/// `create_revision == 0` over `range`: nothing there (an empty range
/// compares as a key that does not exist).
fn empty(range: Range) -> Compare {
    Compare::create_revision(range.0, CompareOp::Equal, 0).with_range(range.1)
}

/// A count of the keys in `range`.
fn count(range: Range) -> TxnOp {
    TxnOp::get(
        range.0,
        Some(GetOptions::new().with_range(range.1).with_count_only()),
    )
}

/// The range whose entries, ahead of an entry of `share`, keep it from
/// holding: writers ahead of a reader; anyone ahead of a writer; permits
/// ahead of a permit (it holds while fewer than its limit are).
fn blockers(keys: &LineKeys, share: Share) -> Range {
    match share {
        Share::Read => keys.kind(Share::Write),
        Share::Write => keys.readers_and_writers(),
        Share::Permit { .. } => keys.kind(share),
    }
}

/// The compares under which `share` may join the line: no other family
/// or limit in it, and the mutex of the same name not held.
fn may_join(keys: &LineKeys, share: Share) -> Vec<Compare> {
    let mut when = vec![Compare::create_revision(
        keys.lock.clone(),
        CompareOp::Equal,
        0,
    )];
    match share {
        Share::Read | Share::Write => when.push(empty(keys.all_permits())),
        Share::Permit { .. } => {
            let (all_start, all_end) = keys.all_permits();
            let (mine_start, mine_end) = keys.kind(share);
            when.push(empty(keys.kind(Share::Read)));
            when.push(empty(keys.kind(Share::Write)));
            when.push(empty((all_start, mine_start)));
            when.push(empty((mine_end, all_end)));
        }
    }
    when
}

/// The reads that say what is in the way when [`may_join`] failed: the
/// mutex's lock key, and the first reader, writer and permit.
fn conflicts(keys: &LineKeys) -> Vec<TxnOp> {
    let first = |range: Range| {
        let opts = GetOptions::new()
            .with_range(range.1)
            .with_limit(1)
            .with_keys_only();
        TxnOp::get(range.0, Some(opts))
    };
    vec![
        TxnOp::get(keys.lock.clone(), Some(GetOptions::new().with_count_only())),
        first(keys.kind(Share::Read)),
        first(keys.kind(Share::Write)),
        first(keys.all_permits()),
    ]
}

/// The puts of a call's entry keys (one, or one per permit), then the
/// count of what is in the way (it is the newest, so everything else is
/// ahead; a call of several permits counts its own keys too).
fn put_and_count(
    keys: &LineKeys,
    share: Share,
    entries: &[Vec<u8>],
    (value, lease): (&[u8], i64),
) -> Vec<TxnOp> {
    let mut ops: Vec<TxnOp> = entries
        .iter()
        .map(|entry| put_leased(entry, value, lease))
        .collect();
    ops.push(count(blockers(keys, share)));
    ops
}

/// Joining the line with `entries` (the call's keys, [`LineKeys::entries`];
/// owner value `value`, on `lease`): puts them and counts what is in the
/// way. Refused, with the reads of [`read_conflict`], where `share` may
/// not join.
pub(crate) fn join(keys: &LineKeys, share: Share, entries: &[Vec<u8>], owner: (&[u8], i64)) -> Txn {
    Txn::new()
        .when(may_join(keys, share))
        .and_then(put_and_count(keys, share, entries, owner))
        .or_else(conflicts(keys))
}

/// [`join`] only if it holds at once (a reader with no writer in line, a
/// writer with nobody in line); a permit joins as with [`join`], and
/// leaves again if it does not hold ([`holds_at_join`]).
pub(crate) fn try_join(
    keys: &LineKeys,
    share: Share,
    entries: &[Vec<u8>],
    owner: (&[u8], i64),
) -> Txn {
    let mut when = may_join(keys, share);
    match share {
        Share::Read => when.push(empty(keys.kind(Share::Write))),
        Share::Write => when.push(empty(keys.readers_and_writers())),
        Share::Permit { .. } => return join(keys, share, entries, owner),
    }
    Txn::new()
        .when(when)
        .and_then(put_and_count(keys, share, entries, owner))
        .or_else(conflicts(keys))
}

/// What a [`try_join`] answer refused for: the key's other use, or
/// `None` when the lock is only busy.
pub(crate) fn try_refused(keys: &LineKeys, share: Share, resp: &TxnResponse) -> Option<Share> {
    if resp.succeeded() {
        return None;
    }
    read_conflict(keys, share, resp)
}

/// Whether the answer to a [`join`] that succeeded says the entry holds at
/// once: the count of what is in the way, itself included where it
/// counts.
pub(crate) fn holds_at_join(share: Share, resp: &TxnResponse) -> bool {
    let last = resp.op_responses().len().saturating_sub(1);
    let counted = range_at(resp, last).map_or(i64::MAX, |g| g.count());
    match share {
        Share::Read => counted == 0,
        Share::Write => counted == 1,
        Share::Permit { limit, .. } => counted <= i64::from(limit),
    }
}

/// What else the key is used as, from a refused [`join`]'s reads: a mutex
/// ([`Share::Write`] stands for it; the caller words it), or the kind of
/// the line's other entries.
pub(crate) fn read_conflict(keys: &LineKeys, want: Share, resp: &TxnResponse) -> Option<Share> {
    let first = |i| range_at(resp, i).and_then(|g| g.kvs().first().map(|kv| kv.key().to_vec()));
    let present = [1, 2, 3]
        .into_iter()
        .filter_map(first)
        .filter_map(|k| keys.share_of(&k))
        .find(|&present| !may_share_a_key(want, present));
    present.or_else(|| {
        let mutex = range_at(resp, 0).is_some_and(|g| g.count() > 0);
        mutex.then_some(Share::Write)
    })
}

/// The read with which a waiter checks whether it holds: its own entry,
/// and the first entries ahead of it that may be in its way
/// ([`ahead`]).
pub(crate) fn check(keys: &LineKeys, share: Share, entry: &[u8], created: i64) -> Repeatable {
    Repeatable::read(Txn::new().and_then([
        TxnOp::get(entry.to_vec(), None),
        ahead(keys, share, created, None),
    ]))
}

/// The next batch of a [`check`] whose batch was full: the entries
/// ahead created after `after`.
pub(crate) fn check_more(keys: &LineKeys, share: Share, created: i64, after: i64) -> Repeatable {
    Repeatable::read(Txn::new().and_then([ahead(keys, share, created, Some(after))]))
}

/// Up to [`BATCH`] entries ahead of a waiter of `share` created at
/// `created` that may be in its way (writers ahead of a reader; anyone
/// ahead of a writer; permits ahead of a permit), in line order, created
/// after `after` when given. Read whole, to count fairlock's only (a
/// count with a create revision filter counts every key in the range:
/// etcd filters the entries it returns, not its count).
pub(crate) fn ahead(keys: &LineKeys, share: Share, created: i64, after: Option<i64>) -> TxnOp {
    let range = blockers(keys, share);
    let mut opts = GetOptions::new()
        .with_range(range.1)
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_max_create_revision((created - 1).max(1))
        .with_limit(BATCH);
    if let Some(after) = after {
        opts = opts.with_min_create_revision(after + 1);
    }
    TxnOp::get(range.0, Some(opts))
}

/// What a [`check`] says of the waiter's own entry.
pub(crate) enum Own {
    /// Gone (its lease ended, or someone deleted it).
    Gone,
    /// Someone told it it holds: the touch's revision is its token.
    Told(i64),
    /// Untouched: count what is ahead ([`read_ahead`]).
    Untold,
}

/// Reads the own entry of a [`check`] answer, created at `created`.
pub(crate) fn read_own(created: i64, resp: &TxnResponse) -> Own {
    let entry = range_at(resp, 0).and_then(|g| g.kvs().first().cloned());
    match entry.filter(|e| e.create_revision() == created) {
        None => Own::Gone,
        Some(e) if e.version() > 1 => Own::Told(e.mod_revision()),
        Some(_) => Own::Untold,
    }
}

/// fairlock's entries in an [`ahead`] read at op `i`, and, when the read
/// stopped at its limit, the create revision to read on from.
pub(crate) fn read_ahead(keys: &LineKeys, resp: &TxnResponse, i: usize) -> (usize, Option<i64>) {
    let (entries, more) = read_head(keys, resp, i);
    (entries.len(), more)
}

/// How many entries in the way keep a waiter of `share` from holding:
/// for `n` of `limit` permits, `limit - n + 1` permits ahead (each key
/// of the line is one permit).
pub(crate) fn in_the_way(share: Share) -> usize {
    match share {
        Share::Read | Share::Write => 1,
        Share::Permit { limit, n } => usize::try_from(limit - n + 1).unwrap_or(usize::MAX),
    }
}

/// A waiter that holds and was not told tells itself: touches its entry
/// if still untouched, so that the touch's revision is its token;
/// otherwise reads it (someone touched it first, or it is gone).
pub(crate) fn self_grant(entry: &[u8], created: i64) -> Txn {
    Txn::new()
        .when([
            Compare::create_revision(entry.to_vec(), CompareOp::Equal, created),
            Compare::version(entry.to_vec(), CompareOp::Equal, 1),
        ])
        .and_then([touch(entry)])
        .or_else([TxnOp::get(entry.to_vec(), None)])
}

/// The token a [`self_grant`] answer gives, if the entry still exists.
pub(crate) fn read_self_grant(created: i64, resp: &TxnResponse, revision: i64) -> Option<i64> {
    if resp.succeeded() {
        return Some(revision);
    }
    let entry = range_at(resp, 0).and_then(|g| g.kvs().first().cloned())?;
    (entry.create_revision() == created && entry.version() > 1).then(|| entry.mod_revision())
}

/// The departure of `entry`: deletes it if it is still the caller's (a
/// holder: unchanged since its grant, `mod_revision == token`; a waiter
/// that gives up: `create_revision == created`), and reads the head of the
/// line right after, in the same txn, for the admission of a departure
/// (`line.rs`, `Departure`): the state that decides whom it admits is
/// exact.
pub(crate) fn leave(keys: &LineKeys, share: Share, entry: &[u8], still: Compare) -> Txn {
    let delete = match keys.keys_of_call(entry) {
        // Several permits: every key of the call.
        Some((start, end)) => TxnOp::delete(start, Some(DeleteOptions::new().with_range(end))),
        None => TxnOp::delete(entry.to_vec(), None),
    };
    Txn::new()
        .when([still])
        .and_then([delete, head(keys, share, None)])
}

/// The compare of a holder's departure: its entry unchanged since the
/// grant at `token`.
pub(crate) fn held_since(entry: &[u8], token: i64) -> Compare {
    Compare::mod_revision(entry.to_vec(), CompareOp::Equal, token)
}

/// The compare of a waiter's departure: its entry still the one it wrote.
pub(crate) fn queued_at(entry: &[u8], created: i64) -> Compare {
    Compare::create_revision(entry.to_vec(), CompareOp::Equal, created)
}

/// The head of `share`'s family's line: up to [`BATCH`] entries in line
/// order; with `window` `(after, up_to)`, those created after `after` and
/// up to `up_to`. Whole entries: their lease tells fairlock's from
/// someone else's (etcd 3.7 leaves leases out of keys-only answers).
pub(crate) fn head(keys: &LineKeys, share: Share, window: Option<(i64, i64)>) -> TxnOp {
    let range = match share {
        Share::Read | Share::Write => keys.readers_and_writers(),
        Share::Permit { .. } => keys.kind(share),
    };
    let mut opts = GetOptions::new()
        .with_range(range.1)
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(BATCH);
    if let Some((after, up_to)) = window {
        opts = opts
            .with_min_create_revision(after + 1)
            .with_max_create_revision(up_to);
    }
    TxnOp::get(range.0, Some(opts))
}

/// The next batch of the head of `share`'s family's line, as a departure
/// admits waiters (see `line/depart.rs`): [`head`] within `window`.
pub(crate) fn head_more(keys: &LineKeys, share: Share, window: (i64, i64)) -> Txn {
    Txn::new().and_then([head(keys, share, Some(window))])
}

/// The entries of a [`head`] read at op `i` of `resp`: fairlock's, in
/// line order; and, when the read stopped at its limit (more may follow),
/// the create revision of the last key it read.
pub(crate) fn read_head(
    keys: &LineKeys,
    resp: &TxnResponse,
    i: usize,
) -> (Vec<Entry>, Option<i64>) {
    let Some(got) = range_at(resp, i) else {
        return (Vec::new(), None);
    };
    let entries = got.kvs().iter().filter_map(|kv| entry(keys, kv)).collect();
    let full = got.kvs().len() as i64 >= BATCH;
    let last = got
        .kvs()
        .last()
        .map(|kv| kv.create_revision())
        .filter(|_| full);
    (entries, last)
}

fn entry(keys: &LineKeys, kv: &KeyValue) -> Option<Entry> {
    if kv.lease() == 0 {
        return None; // not fairlock's: never admitted, never in the way
    }
    Some(Entry {
        share: keys.share_of(kv.key())?,
        key: kv.key().to_vec(),
        create_revision: kv.create_revision(),
        version: kv.version(),
        main: keys.is_main(kv.key()),
    })
}

/// Tells `admitted` that they hold: touches each that is still untouched
/// (a waiter may have told itself meanwhile, see [`self_grant`]), each on
/// its own, so that one that left does not stop the others.
pub(crate) fn admit(admitted: &[Entry]) -> Txn {
    Txn::new().and_then(
        admitted
            .iter()
            .map(|e| {
                TxnOp::txn(
                    Txn::new()
                        .when([
                            Compare::create_revision(
                                e.key.clone(),
                                CompareOp::Equal,
                                e.create_revision,
                            ),
                            Compare::version(e.key.clone(), CompareOp::Equal, 1),
                        ])
                        .and_then([touch(&e.key)]),
                )
            })
            .collect::<Vec<_>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_keeps_a_waiter_from_holding() {
        assert_eq!(in_the_way(Share::Read), 1, "a writer ahead");
        assert_eq!(in_the_way(Share::Write), 1, "anyone ahead");
        // Each key of the line is one permit: `n` of `limit` hold with up
        // to `limit - n` permits ahead.
        assert_eq!(in_the_way(Share::Permit { limit: 3, n: 1 }), 3);
        assert_eq!(in_the_way(Share::Permit { limit: 3, n: 2 }), 2);
        assert_eq!(in_the_way(Share::Permit { limit: 3, n: 3 }), 1);
    }
}
