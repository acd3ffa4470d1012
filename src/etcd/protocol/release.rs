//! Releasing a lock: the release txn that hands the lock key to the first
//! waiter (or frees it), the txn that frees it without a handoff, and the
//! serving of a free lock to the first in line.

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnResponse};

use super::keys::{LockKeys, Successor, pass_along, waiter_mode};
use super::ops::{lock_absent, no_line, put_leased, range_at, still_held, touch};
use super::queue::{successor_query, successors};
use crate::semantics::fairness::Fairness;

/// A holder of the lock, as its release txns see it.
#[derive(Clone, Copy)]
pub(crate) struct Holder<'a> {
    pub keys: &'a LockKeys,
    /// The lock key's mod revision at the grant.
    pub token: i64,
    /// The holder's own queue key and its create revision, if it has one
    /// (a fair grantee keeps it while it holds).
    pub queue: Option<&'a (Vec<u8>, i64)>,
}

impl Holder<'_> {
    /// The compare of every release txn: the lock key is still the one
    /// this holder got (never touch a newer holder's key).
    fn still_ours(&self) -> Compare {
        still_held(&self.keys.lock, self.token)
    }

    /// The delete of the holder's own queue key, if it has one.
    fn delete_queue_key(&self) -> Vec<TxnOp> {
        self.queue
            .iter()
            .map(|(q, _)| TxnOp::delete(q.clone(), None))
            .collect()
    }
}

/// A release txn, and the mode of the waiter it serves, if any.
pub(crate) struct Round {
    when: Vec<Compare>,
    then: Vec<TxnOp>,
    otherwise: Vec<TxnOp>,
    pub handoff: Option<Fairness>,
}

impl Round {
    /// The txn of this round alone.
    pub fn txn(&self) -> Txn {
        Txn::new()
            .when(self.when.clone())
            .and_then(self.then.clone())
            .or_else(self.otherwise.clone())
    }
}

/// The release of the keys of one `lock_all`: every key's round side by
/// side in one txn, so that their keys are released (handed on or freed)
/// at one revision, or none is. It fails when one round would (a queue
/// changed, a key lost); then its else branch is every round's, side by
/// side: each key's answer is read with [`read_release`] at the index
/// returned for it. The rounds' keys are disjoint (each key has its own
/// lock key and queue; a waiter for several keys has an entry in each
/// queue), so their ops never write one key twice, which etcd refuses.
/// At [`super::take_all::MAX_KEYS`] keys it has 2 compares and at most 3
/// ops per key on each branch, within etcd's default `--max-txn-ops` of
/// 128.
pub(crate) fn release_together(rounds: &[Round]) -> (Txn, Vec<usize>) {
    let starts = rounds
        .iter()
        .scan(0, |at, r| {
            let start = *at;
            *at += r.otherwise.len();
            Some(start)
        })
        .collect();
    let all = |part: fn(&Round) -> &Vec<TxnOp>| -> Vec<TxnOp> {
        rounds.iter().flat_map(|r| part(r).clone()).collect()
    };
    let txn = Txn::new()
        .when(
            rounds
                .iter()
                .flat_map(|r| r.when.clone())
                .collect::<Vec<_>>(),
        )
        .and_then(all(|r| &r.then))
        .or_else(all(|r| &r.otherwise));
    (txn, starts)
}

/// One release txn of `h`, handing the lock to the first waiter of `next`
/// (see the spec in `mod.rs`); with nobody known, freeing it if nobody
/// queued after revision `after`.
pub(crate) fn release_round(h: Holder<'_>, next: &[Successor], after: i64) -> Round {
    let keys = h.keys;
    let mut when = vec![h.still_ours()];
    let mut then = h.delete_queue_key();
    let handoff = next.first().map(|s| waiter_mode(&s.key));
    match next.split_first() {
        Some((s, rest)) => {
            when.push(Compare::create_revision(
                s.key.clone(),
                CompareOp::Equal,
                s.create_revision,
            ));
            match waiter_mode(&s.key) {
                Fairness::Unfair => {
                    then.push(TxnOp::delete(keys.lock.clone(), None));
                    then.push(touch(&s.key));
                }
                Fairness::Fair => {
                    then.push(put_leased(&keys.lock, &s.value, s.lease));
                    then.push(grant_touch(keys, s, rest));
                }
            }
        }
        None => {
            when.push(
                Compare::create_revision(keys.queue.clone(), CompareOp::Less, after + 1)
                    .with_prefix(),
            );
            then.push(TxnOp::delete(keys.lock.clone(), None));
        }
    }
    // Failed: whether the lock key is still ours, and the queue head. Our
    // queue key goes either way (see the spec).
    let mut otherwise = vec![
        TxnOp::get(keys.lock.clone(), Some(GetOptions::new().with_keys_only())),
        TxnOp::get(
            keys.queue.clone(),
            Some(successor_query().with_min_create_revision(after + 1)),
        ),
    ];
    otherwise.extend(h.delete_queue_key());
    Round {
        when,
        then,
        otherwise,
        handoff,
    }
}

/// What the answer to a [`release_round`] txn says.
pub(crate) enum Released {
    /// Released (handed on or freed).
    Done,
    /// The lock key is not ours any more.
    Lost,
    /// The queue changed: the waiters now first in line, and the create
    /// revision of the last entry read (waiter or not).
    Changed {
        waiters: Vec<Successor>,
        last: Option<i64>,
    },
}

/// Reads the answer to a [`release_round`] txn of `h`, whose else branch
/// starts at op `at` of the txn (0 but for [`release_together`]).
pub(crate) fn read_release(h: Holder<'_>, resp: &TxnResponse, at: usize) -> Released {
    if resp.succeeded() {
        return Released::Done;
    }
    let ours = range_at(resp, at).is_some_and(|g| {
        g.kvs()
            .first()
            .is_some_and(|kv| kv.mod_revision() == h.token)
    });
    if !ours {
        return Released::Lost;
    }
    let (waiters, last) = range_at(resp, at + 1)
        .map(|g| successors(&h.keys.queue, &g))
        .unwrap_or_default();
    Released::Changed { waiters, last }
}

/// Frees the lock without handing it on: deletes the lock key and the
/// holder's queue key, guarded by the token (the queue key goes either
/// way). For an etcd out of space, which refuses every put but still
/// deletes. Not succeeded: the lock key was not ours any more.
pub(crate) fn free(h: Holder<'_>) -> Txn {
    let mut then = h.delete_queue_key();
    let otherwise = then.clone();
    then.push(TxnOp::delete(h.keys.lock.clone(), None));
    Txn::new()
        .when([h.still_ours()])
        .and_then(then)
        .or_else(otherwise)
}

/// The read before serving a free lock: whether the lock key exists, and
/// the queue head.
pub(crate) fn serve_read(keys: &LockKeys) -> Txn {
    Txn::new().and_then([
        TxnOp::get(keys.lock.clone(), Some(GetOptions::new().with_count_only())),
        TxnOp::get(keys.queue.clone(), Some(successor_query())),
    ])
}

/// Given the answer to [`serve_read`]: the txn that serves the first
/// waiter of a lock key that is free, as a release would (fair: hands it
/// the key; unfair: wakes it), if the key is still free and that waiter
/// still queued. `None` when the lock is held or nobody waits.
pub(crate) fn serve(keys: &LockKeys, read: &TxnResponse) -> Option<Txn> {
    if range_at(read, 0).is_none_or(|g| g.count() > 0) {
        return None;
    }
    let first = range_at(read, 1).and_then(|g| successors(&keys.queue, &g).0.into_iter().next())?;
    let mut then = vec![touch(&first.key)];
    if waiter_mode(&first.key).is_fair() {
        then.push(put_leased(&keys.lock, &first.value, first.lease));
    }
    Some(
        Txn::new()
            .when([
                lock_absent(keys),
                Compare::create_revision(
                    first.key.clone(),
                    CompareOp::Equal,
                    first.create_revision,
                ),
                // Readers may have joined while L was free: the mutex is not.
                no_line(keys),
            ])
            .and_then(then),
    )
}

/// The touch that grants the lock to fair successor `s`: its value gains
/// the waiters behind it (`rest`, see [`pass_along`]) so that it needs no
/// lookup.
fn grant_touch(keys: &LockKeys, s: &Successor, rest: &[Successor]) -> TxnOp {
    match pass_along(keys, s, rest) {
        Some(value) => TxnOp::put(
            s.key.clone(),
            value,
            Some(PutOptions::new().with_ignore_lease()),
        ),
        None => touch(&s.key),
    }
}
