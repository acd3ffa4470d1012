//! etcd's own layout (`Layout::Etcd`): the keys and txns of the lock and
//! election recipes of etcd's Go client (`client/v3/concurrency`), which
//! `etcdctl lock`, `etcdctl elect` and etcd's lock and election services
//! run too, so that a fairlock process and any of those exclude each
//! other and queue in one line on one name. This comment is its
//! specification; the builders below send nothing.
//!
//! # Keys
//! For prefix `P` and lock or election `k`, the **name** is `N = P k` and
//! every contender (holder, waiter, leader, candidate) has one key under
//! it: `N/<lease>`, its session lease's id in lower-case hex with no
//! padding (Go's `%x`; etcd grants only positive ids), bound to that
//! lease. Value: empty for Go's mutex, fairlock's owner value for a
//! fairlock lock, the proposal for an election.
//!
//! **The holder (the leader) is the key under `N/` with the lowest create
//! revision**; the others wait in create-revision order. Every key under
//! `N/` counts, whoever wrote it, nested names included (a lock `a` waits
//! for the holders of `a/b`): that is etcd's rule, and any other rule
//! would let a Go client and fairlock hold at once. The **fencing token**
//! is the holder's create revision: holders are granted in create order,
//! so it grows with every new holder.
//!
//! One lease has one key per name: a locker that waits on one name twice
//! at once needs a lease per attempt.
//!
//! # Transactions
//! `c` the caller's key, `l` its lease, `v` its value, `R` its create
//! revision, `L` fairlock's own lock key of the same name (`N` itself:
//! the other layout's holder).
//!
//! ```text
//! enqueue                 if c.create == 0 and L.create == 0
//!   (lock, campaign)        then put c=v@l; count N/ (every key: all
//!                                created at or before R = this revision)
//!                           else read c; count L
//! try_lock                if every key under N/ has create == 0 (none)
//!                           and L.create == 0
//!                           then put c=v@l
//!                           else count L
//! release (unlock,        if c.create == R then delete c
//!   resign, give up)
//! give up unanswered      if c.lease == l then delete c
//!   (the enqueue's answer   (its create revision is not known; a key on
//!    was lost)               our lease under our name is ours)
//! proclaim                if c.create == R then put c=v@l
//! fenced (user's txn)     if c.create == R then <the user's txn>
//! ```
//!
//! # Reads
//! - **ahead**: if `c.create == R`, the key under `N/` created last
//!   before `R` (keys only, sorted by create revision, limit 1: etcd
//!   filters and sorts a range before it limits it): the contender just
//!   ahead of the caller, whose deletion it waits for before it reads
//!   again, as etcd's `waitDeletes` does. Each handoff thus wakes one
//!   waiter, not every one. When `c` is gone it reads nothing: the
//!   caller's session lease ended, or someone deleted its key.
//! - **first**: the key under `N/` with the lowest create revision, whole
//!   (its value is the leader's proposal): who holds, who leads.
//! - **all**: every key under `N/` in create order, whole (status).
//!
//! # Why it is safe
//! - **Exclusion, with any peer.** A contender holds when no key under
//!   `N/` was created before its own. Keys are only created, never
//!   re-created under one create revision, so at most one key is first at
//!   any revision, for fairlock and a Go client alike. A fairlock waiter
//!   holds only once a read finds no key ahead of it; between reads it
//!   watches the key just ahead from the revision of the last read, so
//!   no deletion is missed. Keys created after `R` never count (a key of
//!   that name created again has a create revision after `R`).
//! - **A waiter whose key is gone is told, not granted.** Its key can go
//!   only with its lease or by someone's delete; the waiter watches its
//!   own key's deletion too, and every read compares it, so the wait ends
//!   with the session lost. Go's recipe grants it once the keys ahead are gone (etcd
//!   issues 11408, 19597): with a peer that does, two can hold.
//! - **Nothing is left behind.** A call that gives up deletes its key by
//!   its create revision, or, when the enqueue's answer was lost, by its
//!   lease, which no one else's key under `N/` has.
//! - **No mix of layouts.** The enqueue and `try_lock` compare `L`
//!   absent: a name held in fairlock's own layout is refused, not
//!   shared. The other direction cannot be checked cheaply (fairlock's
//!   queue is under `N/` too), so every process on one name must switch
//!   at once (README: migrating a fleet).

use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnResponse};

use super::keys::prefix_end;
use super::ops::{Repeatable, put_leased, range_at};

/// The keys of one name in etcd's layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NameKeys {
    /// `N = P k`: fairlock's own lock key of the same name.
    pub name: Vec<u8>,
    /// `N/`: where every contender's key is.
    pub dir: Vec<u8>,
}

impl NameKeys {
    /// The keys of `key` under `prefix` (which ends in `/`, or is empty).
    pub fn new(prefix: &str, key: &str) -> Self {
        let name = format!("{prefix}{key}").into_bytes();
        let mut dir = name.clone();
        dir.push(b'/');
        NameKeys { name, dir }
    }

    /// The key of the contender on `lease` (positive): `N/<lease hex>`.
    pub fn contender(&self, lease: i64) -> Vec<u8> {
        let mut key = self.dir.clone();
        key.extend_from_slice(format!("{lease:x}").as_bytes());
        key
    }

    /// The end of the range of every contender's key.
    pub fn end(&self) -> Vec<u8> {
        prefix_end(&self.dir)
    }

    /// The lease whose contender key is `key`, if it is named so.
    pub fn lease_of(&self, key: &[u8]) -> Option<i64> {
        let hex = std::str::from_utf8(key.strip_prefix(self.dir.as_slice())?).ok()?;
        let lowercase = hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        let lease = i64::from_str_radix(hex, 16).ok()?;
        (lowercase && !hex.starts_with('0') && lease > 0).then_some(lease)
    }

    /// fairlock's own lock key of this name is absent.
    fn own_layout_free(&self) -> Compare {
        Compare::create_revision(self.name.clone(), CompareOp::Equal, 0)
    }

    /// A count of fairlock's own lock key of this name: 1 when the name
    /// is held in that layout.
    fn count_own_layout(&self) -> TxnOp {
        TxnOp::get(self.name.clone(), Some(GetOptions::new().with_count_only()))
    }
}

/// The enqueue of the contender `c` on `lease` with `value` (see the
/// spec): the answer's first op is the count of every contender at its
/// revision when it succeeded; else `c` read, then the count of `L`.
/// Repeatable: a second copy finds `c` and only reads.
pub(crate) fn enqueue(n: &NameKeys, c: &[u8], value: &[u8], lease: i64) -> Repeatable {
    Repeatable::write(
        Txn::new()
            .when([
                Compare::create_revision(c.to_vec(), CompareOp::Equal, 0),
                n.own_layout_free(),
            ])
            .and_then([
                put_leased(c, value, lease),
                TxnOp::get(
                    n.dir.clone(),
                    Some(GetOptions::new().with_range(n.end()).with_count_only()),
                ),
            ])
            .or_else([TxnOp::get(c.to_vec(), None), n.count_own_layout()]),
    )
}

/// `try_lock`: takes the name if nobody contends (see the spec); the
/// else branch counts `L`. Not repeatable: a late copy could take the
/// name after the caller gave up.
pub(crate) fn try_take(n: &NameKeys, c: &[u8], value: &[u8], lease: i64) -> Txn {
    Txn::new()
        .when([
            Compare::create_revision(n.dir.clone(), CompareOp::Equal, 0).with_range(n.end()),
            n.own_layout_free(),
        ])
        .and_then([put_leased(c, value, lease)])
        .or_else([n.count_own_layout()])
}

/// The compare of every write a contender makes once it knows its create
/// revision `rev`: its key is still the one it created.
pub(crate) fn still_ours(c: &[u8], rev: i64) -> Compare {
    Compare::create_revision(c.to_vec(), CompareOp::Equal, rev)
}

/// Deletes contender `c` created at `rev`: unlock, resign, giving up.
/// Repeatable: a second copy finds `c` gone.
pub(crate) fn release(c: &[u8], rev: i64) -> Repeatable {
    Repeatable::write(
        Txn::new()
            .when([still_ours(c, rev)])
            .and_then([TxnOp::delete(c.to_vec(), None)]),
    )
}

/// Deletes contender `c` if it is on `lease`: giving up when the
/// enqueue's answer was lost (its create revision unknown). Repeatable.
pub(crate) fn give_up_unanswered(c: &[u8], lease: i64) -> Repeatable {
    Repeatable::write(
        Txn::new()
            .when([Compare::lease(c.to_vec(), CompareOp::Equal, lease)])
            .and_then([TxnOp::delete(c.to_vec(), None)]),
    )
}

/// A leader's new proposal `value` on contender `c` created at `rev`.
/// Repeatable: a second copy writes the same value again.
pub(crate) fn proclaim(c: &[u8], rev: i64, value: &[u8], lease: i64) -> Repeatable {
    Repeatable::write(
        Txn::new()
            .when([still_ours(c, rev)])
            .and_then([put_leased(c, value, lease)]),
    )
}

/// If contender `c` created at `rev` is still there, the contender
/// created last before it, key only: the one it waits on. Fails (reading
/// nothing) when `c` is gone.
pub(crate) fn ahead(n: &NameKeys, c: &[u8], rev: i64) -> Repeatable {
    let options = GetOptions::new()
        .with_range(n.end())
        .with_keys_only()
        .with_max_create_revision(rev - 1)
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(1);
    Repeatable::read(
        Txn::new()
            .when([still_ours(c, rev)])
            .and_then([TxnOp::get(n.dir.clone(), Some(options))]),
    )
}

/// What the answer to [`enqueue`] says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Enqueued {
    /// The contender's key is there, created at `rev`, with `ahead`
    /// contenders created before it when the answer tells (it does when
    /// this very txn wrote the key).
    Queued { rev: i64, ahead: Option<i64> },
    /// The name is held in fairlock's own layout: nothing was written.
    OtherLayout,
    /// Neither: the key was written and deleted in between, or fairlock's
    /// lock key went meanwhile. Nothing was written; try again.
    Again,
}

/// Reads the answer to [`enqueue`], which ran at `revision`.
pub(crate) fn read_enqueue(resp: &TxnResponse, revision: i64) -> Enqueued {
    if resp.succeeded() {
        let ahead = range_at(resp, 1).map(|count| count.count() - 1);
        return Enqueued::Queued {
            rev: revision,
            ahead,
        };
    }
    if let Some(kv) = range_at(resp, 0).and_then(|own| own.kvs().first().cloned()) {
        return Enqueued::Queued {
            rev: kv.create_revision(),
            ahead: None,
        };
    }
    match range_at(resp, 1).is_some_and(|other| other.count() > 0) {
        true => Enqueued::OtherLayout,
        false => Enqueued::Again,
    }
}

/// What the answer to [`try_take`] says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Tried {
    /// Taken: the contender's key was created at the txn's revision.
    Taken,
    /// Someone contends: nothing was written.
    Busy,
    /// The name is held in fairlock's own layout: nothing was written.
    OtherLayout,
}

/// Reads the answer to [`try_take`].
pub(crate) fn read_try(resp: &TxnResponse) -> Tried {
    if resp.succeeded() {
        return Tried::Taken;
    }
    match range_at(resp, 0).is_some_and(|other| other.count() > 0) {
        true => Tried::OtherLayout,
        false => Tried::Busy,
    }
}

/// What the answer to [`ahead`] says: `None` when the contender's own
/// key is gone, else the key it waits on (`None` when it is first).
pub(crate) fn read_ahead(resp: &TxnResponse) -> Option<Option<Vec<u8>>> {
    if !resp.succeeded() {
        return None;
    }
    let keys = range_at(resp, 0)?;
    Some(keys.kvs().first().map(|kv| kv.key().to_vec()))
}

/// The read of the first contender, whole (its value is the leader's
/// proposal), at revision `at` or the latest: who holds, who leads. Of
/// `N/` to [`NameKeys::end`].
pub(crate) fn first(n: &NameKeys, at: Option<i64>) -> GetOptions {
    let options = GetOptions::new()
        .with_range(n.end())
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    match at {
        Some(at) => options.with_revision(at),
        None => options,
    }
}

/// The read of every contender in create order, whole (status), from a
/// name's `N/` or the prefix, to `end`.
pub(crate) fn all(end: Vec<u8>) -> GetOptions {
    GetOptions::new()
        .with_range(end)
        .with_sort(SortTarget::Create, SortOrder::Ascend)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contender_keys_are_go_s() {
        let n = NameKeys::new("/app/", "jobs");
        assert_eq!(n.name, b"/app/jobs");
        // fmt.Sprintf("%s%x", "/app/jobs/", 0x694d56cc2663a25c)
        let key = n.contender(0x694d_56cc_2663_a25c);
        assert_eq!(key, b"/app/jobs/694d56cc2663a25c");
        assert_eq!(n.lease_of(&key), Some(0x694d_56cc_2663_a25c));
        assert_eq!(n.contender(10), b"/app/jobs/a");
    }

    #[test]
    fn only_go_s_names_are_contenders_of_ours() {
        let n = NameKeys::new("", "x");
        for odd in [
            "x/",
            "x/0a",
            "x/A",
            "x/a/b",
            "x/-1",
            "x/0",
            "y/a",
            "x/_OWNERS_/f0",
        ] {
            assert_eq!(n.lease_of(odd.as_bytes()), None, "{odd}");
        }
        assert_eq!(n.lease_of(b"x/7fffffffffffffff"), Some(i64::MAX));
        assert_eq!(n.lease_of(b"x/8000000000000000"), None);
    }
}
