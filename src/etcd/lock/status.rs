//! Who holds which lock and who waits for it, read at one revision, with
//! the time each holder's lease has left (for `fairlock status` and for
//! progress reports of a waiting `lock`).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use etcd_client::{GetOptions, SortOrder, SortTarget};

use super::etcd_locker::EtcdLocker;
use crate::api::status::LineEntry;
use crate::etcd::client::error::EtcdError;
use crate::etcd::client::request::request;
use crate::etcd::config::Layout;
use crate::etcd::etcd_layout;
use crate::etcd::protocol::election::{decode, is_value_key};
use crate::etcd::protocol::keys::{entry_name, prefix_end};
use crate::etcd::protocol::line::LineKeys;
use crate::semantics::admission::{Admission, Share};
use crate::{
    Key, Leader, LeaseId, LockHolder, LockStatus, LockWaiter, Owner, RESERVED_SEGMENT, Result,
};

impl EtcdLocker {
    /// The locks under this locker's prefix (or just `key`), with holders
    /// and queues read at one revision, and each holder's lease with the
    /// time it has left (asked right after, one query per lease). Locks
    /// with neither holder nor waiters do not exist in etcd and are not
    /// listed.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(locker: fairlock::etcd::EtcdLocker) -> fairlock::Result<()> {
    /// for lock in locker.status(None).await? {
    ///     let holder = lock.holder.map_or("free".into(), |h| h.owner.describe());
    ///     println!("{}: {holder}, {} waiting", lock.key, lock.waiters.len());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`crate::Error::InvalidKey`] for a bad key; backend errors.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn status(&self, key: Option<&Key>) -> Result<Vec<LockStatus>> {
        if self.config().layout() == Layout::Etcd {
            if let Some(key) = key {
                key.validate()?;
            }
            let names = etcd_layout::status::read(self.inner(), key).await?;
            return self.with_ttl(names).await;
        }
        let prefix = self.config().prefix().to_owned();
        let Some(key) = key else {
            let (all, _) = self
                .read(
                    prefix.clone().into_bytes(),
                    Some(prefix_end(prefix.as_bytes())),
                    None,
                )
                .await?;
            return self.with_ttl(group(&prefix, all)).await;
        };
        key.validate()?;
        // The lock key and its queue, but not `<key>x` or `<key>/x`.
        let lock = format!("{prefix}{key}").into_bytes();
        let queue = format!("{prefix}{key}/{RESERVED_SEGMENT}/").into_bytes();
        let end = prefix_end(&queue);
        // Two ranges, the second read at the first one's revision.
        let (mut kvs, at) = self.read(lock, None, None).await?;
        kvs.extend(self.read(queue, Some(end), Some(at)).await?.0);
        self.with_ttl(group(&prefix, kvs)).await
    }

    /// `locks` with each holder's `ttl_left` from its lease's time to live.
    async fn with_ttl(&self, mut locks: Vec<LockStatus>) -> Result<Vec<LockStatus>> {
        // Every lease once: asked first, then filled in (no borrow of
        // `locks` lives across a request).
        let mut known: HashMap<LeaseId, Option<Duration>> = HashMap::new();
        let leases: std::collections::BTreeSet<LeaseId> = locks
            .iter()
            .flat_map(|l| l.holder.iter().chain(&l.holders))
            .filter_map(|h| h.lease.filter(|&l| l != LeaseId::NONE))
            .collect();
        for lease in leases {
            let left = self.time_to_live(lease).await?;
            known.insert(lease, left);
        }
        for lock in &mut locks {
            for holder in lock.holder.iter_mut().chain(lock.holders.iter_mut()) {
                if let Some(&left) = holder.lease.and_then(|l| known.get(&l)) {
                    holder.ttl_left = left;
                }
            }
        }
        Ok(locks)
    }

    /// The time `lease` has left; `None` once it is gone, or when the user
    /// may not read the keys attached to it (etcd 3.4.26 and later check).
    async fn time_to_live(&self, lease: LeaseId) -> Result<Option<Duration>> {
        const OP: &str = "status";
        let mut client = self.client().clone();
        let timeout = self.config().request_timeout();
        let answer = request(OP, timeout, client.lease_time_to_live(lease.0, None)).await;
        match answer {
            // etcd answers -1 for a lease that expired or was revoked.
            Ok(resp) => Ok(u64::try_from(resp.ttl()).ok().map(Duration::from_secs)),
            Err(EtcdError::Request {
                source: etcd_client::Error::GRpcStatus(status),
                ..
            }) if status.code() == tonic::Code::PermissionDenied => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The keys from `from` (to `end`), at revision `at` or the latest;
    /// and the revision read at.
    async fn read(
        &self,
        from: Vec<u8>,
        end: Option<Vec<u8>>,
        at: Option<i64>,
    ) -> Result<(Vec<(Vec<u8>, Vec<u8>, i64, i64)>, i64)> {
        let mut opts = GetOptions::new().with_sort(SortTarget::Create, SortOrder::Ascend);
        if let Some(end) = end {
            opts = opts.with_range(end);
        }
        if let Some(at) = at {
            opts = opts.with_revision(at);
        }
        let resp = self.inner().get("status", from, opts).await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let kvs = resp
            .kvs()
            .iter()
            .map(|kv| {
                (
                    kv.key().to_vec(),
                    kv.value().to_vec(),
                    kv.mod_revision(),
                    kv.lease(),
                )
            })
            .collect();
        Ok((kvs, revision))
    }
}

/// Sorts keys (in create-revision order) into locks: `<prefix><key>` is a
/// lock key, `<prefix><key>/_OWNERS_/<locker>/<f|u><attempt>` a waiter.
fn group(prefix: &str, kvs: Vec<(Vec<u8>, Vec<u8>, i64, i64)>) -> Vec<LockStatus> {
    let marker = format!("/{RESERVED_SEGMENT}/");
    let mut locks: BTreeMap<String, LockStatus> = BTreeMap::new();
    let mut lines: BTreeMap<String, Vec<LineEntry>> = BTreeMap::new();
    let mut records: BTreeMap<String, Leader> = BTreeMap::new();
    for (key, value, mod_revision, lease) in kvs {
        let key = String::from_utf8_lossy(&key);
        let Some(name) = key.strip_prefix(prefix) else {
            continue;
        };
        let (lock, waiter) = match name.split_once(&marker) {
            Some((lock, waiter)) => (lock, Some(waiter)),
            None => (name, None),
        };
        let entry = locks
            .entry(lock.to_owned())
            .or_insert_with(|| LockStatus::new(lock));
        // A fair holder's queue key may carry more lines after its grant:
        // the waiters behind it (see `release.rs`).
        let first = value.split(|&b| b == b'\n').next().unwrap_or_default();
        let owner = Owner::parse(&String::from_utf8_lossy(first));
        let queue = format!("{prefix}{lock}{marker}");
        match waiter.map(|_| entry_name(queue.as_bytes(), key.as_bytes()).filter(|_| lease != 0)) {
            Some(Some(name)) => {
                entry
                    .waiters
                    .push(LockWaiter::new(owner, name.locker, name.mode.is_fair()));
            }
            // An election's leader record: fairlock's own, not a waiter.
            Some(None) if is_value_key(queue.as_bytes(), key.as_bytes()) => {
                if let Some(leader) = decode(&value).and_then(|r| r.leader(lock)) {
                    records.insert(lock.to_owned(), leader);
                }
            }
            Some(None) => match line_entry(prefix, lock, key.as_bytes(), lease) {
                Some((share, locker)) => {
                    lines.entry(lock.to_owned()).or_default().push(LineEntry {
                        share,
                        locker,
                        owner,
                        held: Some(u64::try_from(mod_revision).unwrap_or_default()),
                        lease: Some(LeaseId(lease)),
                    })
                }
                None => entry.foreign.push(key.clone().into_owned()),
            },
            None => {
                let token = u64::try_from(mod_revision).unwrap_or_default();
                let mut holder = LockHolder::new(owner, token);
                holder.lease = Some(LeaseId(lease));
                entry.holder = Some(holder);
            }
        }
    }
    // Holders and waiters told apart by the rule every backend grants by.
    for (lock, mut entries) in lines {
        let mut admission = Admission::default();
        for e in &mut entries {
            e.held = e.held.filter(|_| admission.next(e.share));
        }
        if let Some(status) = locks.get_mut(&lock) {
            status.fill_line(entries);
        }
    }
    // An election's leader: the record of the lock holder's term (one of
    // an earlier term is nobody's).
    for (lock, leader) in records {
        if let Some(status) = locks.get_mut(&lock)
            && status.holder.as_ref().map(|h| h.fencing_token) == Some(leader.fencing_token)
        {
            status.leader = Some(leader);
        }
    }
    // A fair holder's own queue key stays until it releases, and may sort
    // before or after its lock key: drop it from the waiters.
    for lock in locks.values_mut() {
        if let Some(holder) = &lock.holder {
            lock.waiters.retain(|w| w.owner.raw != holder.owner.raw);
        }
    }
    locks.into_values().collect()
}

/// What line entry `key` of lock `lock` asks for, and its locker's id.
fn line_entry(prefix: &str, lock: &str, key: &[u8], lease: i64) -> Option<(Share, String)> {
    if lease == 0 {
        return None;
    }
    let keys = LineKeys::new(prefix, &Key::from(lock));
    // A call of several permits shows once, by its main key.
    keys.parse(key)
        .filter(|&(_, _, index)| index == 0)
        .map(|(share, locker, _)| (share, locker.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn kv(key: &str, value: &str, rev: i64) -> (Vec<u8>, Vec<u8>, i64, i64) {
        (key.into(), value.into(), rev, 7)
    }

    #[test]
    fn groups_holders_and_queues() {
        let locks = group(
            "/p/",
            vec![
                // Granted with the waiters behind it passed along.
                kv(
                    "/p/a/_OWNERS_/00000000000000000000000000000001/f0",
                    "x pid=1 host=h at=1000\n4 7 00000000000000000000000000000002/f0 y pid=2 host=h at=2000",
                    3,
                ),
                kv("/p/a", "x pid=1 host=h at=1000", 5),
                kv(
                    "/p/a/_OWNERS_/00000000000000000000000000000002/f0",
                    "y pid=2 host=h at=2000",
                    4,
                ),
                kv(
                    "/p/a/_OWNERS_/00000000000000000000000000000003/u1",
                    "z pid=3",
                    6,
                ),
                kv("/p/a/_OWNERS_/foreign", "not-a-fairlock-value", 7),
                kv(
                    "/p/a/_OWNERS_/leader",
                    "00000000000000000005 e1 since=1\nv",
                    8,
                ),
                (
                    "/p/a/_OWNERS_/00000000000000000000000000000005/f2".into(),
                    "no lease".into(),
                    9,
                    0,
                ),
                kv("/p/b/_OWNERS_/00000000000000000000000000000004/f0", "w", 8),
            ],
        );
        assert_eq!(locks.len(), 2);
        let a = &locks[0];
        assert_eq!(a.key, "a");
        let holder = a.holder.as_ref().expect("holder");
        assert_eq!(holder.fencing_token, 5);
        assert_eq!(holder.lease, Some(LeaseId(7)));
        assert_eq!(holder.nodes, None);
        assert_eq!(holder.owner.describe(), "h:1");
        assert_eq!(
            holder.owner.requested_at,
            Some(UNIX_EPOCH + Duration::from_secs(1))
        );
        let waiters: Vec<_> = a
            .waiters
            .iter()
            .map(|w| (w.locker.as_str(), w.fair))
            .collect();
        let id = |n: u8| format!("{n:032x}");
        assert_eq!(waiters, [(id(2).as_str(), true), (id(3).as_str(), false)]);
        assert_eq!(
            a.foreign,
            [
                "/p/a/_OWNERS_/foreign".to_string(),
                format!("/p/a/_OWNERS_/{}/f2", id(5))
            ]
        );
        assert_eq!(locks[1].key, "b");
        assert!(locks[1].holder.is_none());
        assert_eq!(locks[1].waiters[0].owner.describe(), "w");
    }
}
