//! What a backend's `status()` reports: who holds a lock and who waits for
//! it, in one set of types for every backend ([`LockStatus`],
//! [`LockHolder`], [`LockWaiter`]). Fields only one backend can fill are
//! `Option`s (etcd: [`LockHolder::lease`]; Redis: [`LockHolder::nodes`]).
//! With feature `serde`
//! they implement `serde::Serialize` as `fairlock status --json` prints
//! them (`serialize.rs`).

use std::fmt;
use std::time::Duration;

#[cfg(any(feature = "etcd", feature = "redis"))]
use crate::semantics::admission::Share;
use crate::{Leader, Owner};

/// One lock as a backend sees it at one moment.
///
/// # Examples
/// ```
/// use fairlock::{LockHolder, LockStatus, Owner};
///
/// let mut lock = LockStatus::new("jobs/export");
/// lock.holder = Some(LockHolder::new(Owner::parse("u1 pid=42 host=web1"), 7));
/// assert_eq!(lock.holder.map(|h| h.owner.describe()), Some("web1:42".into()));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The lock's key (without the configured prefix).
    pub key: String,
    /// The holder, if the lock is held.
    pub holder: Option<LockHolder>,
    /// Live waiters in queue order (fair mode grants in this order).
    pub waiters: Vec<LockWaiter>,
    /// etcd: keys under the lock's queue that fairlock did not write (no
    /// lease, or a name that is not `<locker id>/<f|u><slot>`), as full
    /// etcd keys. They are never granted the lock and do not block the
    /// queue; remove them with `etcdctl del <key>`. Redis: keys of the
    /// lock that fairlock did not write (a lock key of another type or
    /// whose value does not parse, a queue that is not a sorted set, a
    /// waiter record that does not parse or never expires, a fencing
    /// counter that cannot count), as full Redis keys; remove them with
    /// `redis-cli DEL <key>`.
    pub foreign: Vec<String>,
    /// What kind of lock the key is: a mutex, a read/write lock or a
    /// semaphore.
    pub kind: LockKind,
    /// Every holder of a read/write lock or semaphore, in line order (the
    /// first is also [`LockStatus::holder`]); empty for a mutex, whose one
    /// holder is [`LockStatus::holder`].
    pub holders: Vec<LockHolder>,
    /// For an election (etcd, Redis): its leader, when the holder of the
    /// election's lock has written its value; `None` for a plain lock.
    pub leader: Option<Leader>,
}

/// What kind of lock a key is, as [`LockStatus::kind`] tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// A mutex (`Locker::lock`): one holder.
    Mutex,
    /// A read/write lock (`Locker::read_lock`, `write_lock`): readers
    /// together, or one writer.
    ReadWrite,
    /// A semaphore (`Locker::acquire_permits`): up to `limit` holders.
    Semaphore {
        /// How many may hold at once.
        limit: u32,
    },
}

/// The holder of a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockHolder {
    /// Who asked for the lock.
    pub owner: Owner,
    /// The holder's fencing token.
    pub fencing_token: u64,
    /// etcd: the lease the lock key is bound to ([`LeaseId::NONE`] for a
    /// key without one, which fairlock did not write and nobody will
    /// release). `None` on Redis, which has no leases.
    pub lease: Option<LeaseId>,
    /// Time until the lock expires unless its holder renews it: on etcd
    /// the lease's time to live (whole seconds, as etcd answers), on Redis
    /// the lock key's (the shortest among the nodes holding it). `None`
    /// when there is nothing to expire or it is already gone.
    pub ttl_left: Option<Duration>,
    /// Redis: on how many of the configured nodes this holder holds the
    /// key (Redlock needs a majority). `None` on etcd, which replicates by
    /// itself.
    pub nodes: Option<NodeCount>,
    /// `true` for a reader of a read/write lock.
    pub reads: bool,
    /// How many of a semaphore's permits it holds (1 for every other
    /// lock).
    pub permits: u32,
}

/// A queued waiter.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockWaiter {
    /// Who waits.
    pub owner: Owner,
    /// The id of the waiting locker (its `id()`: `EtcdLocker::id`,
    /// `RedisLocker::id`).
    pub locker: String,
    /// `true` for a fair waiter (handed the lock in order), `false` for an
    /// unfair one (woken to try).
    pub fair: bool,
    /// `true` for a reader of a read/write lock.
    pub reads: bool,
    /// How many of a semaphore's permits it asks for (1 for every other
    /// lock).
    pub permits: u32,
}

/// An etcd lease id. Shown as etcd's own tools show it, 16 hex digits
/// (`etcdctl lease timetolive <id>` takes it as printed), and serialized
/// (feature `serde`) as that string: as a JSON number a 63-bit id would
/// lose digits in readers that parse numbers as doubles (JavaScript,
/// jq 1.6).
///
/// # Examples
/// ```
/// let lease = fairlock::LeaseId(4111120175541098758);
/// assert_eq!(lease.to_string(), "390da2049c119906");
/// assert_eq!(fairlock::LeaseId(255).to_string(), "00000000000000ff");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(pub i64);

impl LeaseId {
    /// etcd's "no lease" (lease 0).
    pub const NONE: LeaseId = LeaseId(0);
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// On how many of the configured Redis nodes a holder holds the lock key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeCount {
    /// Nodes whose lock key names this holder.
    pub holding: usize,
    /// Nodes configured (1 on a single instance).
    pub total: usize,
}

impl LockStatus {
    /// A lock with neither holder nor waiters, to fill in.
    #[must_use]
    pub fn new(key: impl Into<String>) -> Self {
        LockStatus {
            key: key.into(),
            holder: None,
            waiters: Vec::new(),
            foreign: Vec::new(),
            kind: LockKind::Mutex,
            holders: Vec::new(),
            leader: None,
        }
    }
}

impl LockHolder {
    /// A holder with no lease, time to live or node count, to fill in.
    #[must_use]
    pub fn new(owner: Owner, fencing_token: u64) -> Self {
        LockHolder {
            owner,
            fencing_token,
            lease: None,
            ttl_left: None,
            nodes: None,
            reads: false,
            permits: 1,
        }
    }
}

impl LockWaiter {
    /// A waiter of the locker with id `locker`.
    #[must_use]
    pub fn new(owner: Owner, locker: impl Into<String>, fair: bool) -> Self {
        LockWaiter {
            owner,
            locker: locker.into(),
            fair,
            reads: false,
            permits: 1,
        }
    }
}

impl NodeCount {
    /// `holding` of `total` nodes.
    #[must_use]
    pub fn new(holding: usize, total: usize) -> Self {
        NodeCount { holding, total }
    }
}

/// One entry of a read/write lock's or semaphore's line, as a backend read
/// it.
#[cfg(any(feature = "etcd", feature = "redis"))]
pub(crate) struct LineEntry {
    pub(crate) share: Share,
    pub(crate) owner: Owner,
    /// The id of the entry's locker.
    pub(crate) locker: String,
    /// Its fencing token when it holds; `None` while it waits.
    pub(crate) held: Option<u64>,
    /// etcd: the lease of its key.
    pub(crate) lease: Option<LeaseId>,
}

#[cfg(any(feature = "etcd", feature = "redis"))]
impl LockStatus {
    /// Fills in this lock's line from `entries`, in line order: its kind,
    /// its holders (the first is also [`LockStatus::holder`]) and its
    /// (fair) waiters.
    pub(crate) fn fill_line(&mut self, entries: impl IntoIterator<Item = LineEntry>) {
        for e in entries {
            let (kind, permits) = match e.share {
                Share::Permit { limit, n } => (LockKind::Semaphore { limit }, n),
                Share::Read | Share::Write => (LockKind::ReadWrite, 1),
            };
            self.kind = kind;
            let reads = e.share == Share::Read;
            if let Some(token) = e.held {
                let mut holder = LockHolder::new(e.owner, token);
                (holder.lease, holder.reads, holder.permits) = (e.lease, reads, permits);
                self.holders.push(holder);
            } else {
                let mut waiter = LockWaiter::new(e.owner, e.locker, true);
                (waiter.reads, waiter.permits) = (reads, permits);
                self.waiters.push(waiter);
            }
        }
        self.holder = self.holders.first().cloned();
    }
}

/// The locker an owner names (its `locker=` field; Redis), or "".
#[cfg(feature = "redis")]
pub(crate) fn locker_of(owner: &Owner) -> String {
    owner.field("locker").unwrap_or_default().to_owned()
}
