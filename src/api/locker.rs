//! The `Locker` trait every backend implements (its guard: `guard.rs`).

use async_trait::async_trait;

use crate::{Context, Key, Leader, LeaderStream, Leadership, LockGuard, MultiGuard, Result};

/// A source of distributed locks: one backend, one mode (fair or unfair).
///
/// Lockers are cheap to share (`Arc<dyn Locker>`) and may be used from many
/// tasks at once; two tasks sharing a locker never hold the same key at once.
///
/// The trait is dyn-compatible; [`crate::get_locker`] hands out
/// `Arc<dyn Locker>`.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> fairlock::Result<()> {
/// use std::time::Duration;
/// use fairlock::{Context, Key};
///
/// fairlock::etcd::register(fairlock::etcd::EtcdConfig::new(["127.0.0.1:2379"])).await?;
/// let locker = fairlock::get_locker(true)?;
/// let ctx = Context::background().with_timeout(Duration::from_secs(10));
/// let guard = locker.lock(&ctx, &Key::from("jobs/export")).await?;
/// println!("holding {} with fencing token {}", guard.key(), guard.fencing_token());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Locker: Send + Sync + 'static {
    /// Takes the lock if it is free now, without waiting.
    ///
    /// In fair mode the lock counts as taken while anyone is queued for it.
    /// On a key in use by readers and writers it is
    /// [`Locker::try_write_lock`].
    ///
    /// # Errors
    /// [`crate::Error::InvalidKey`] for a bad key; backend errors.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped after the backend granted the
    /// lock, the lock is released in the background.
    async fn try_lock(&self, key: &Key) -> Result<Option<LockGuard>>;

    /// Waits until the lock is acquired, the context is cancelled or its
    /// deadline passes.
    ///
    /// On a key in use by readers and writers ([`Locker::read_lock`]) it
    /// is the key's write lock ([`Locker::write_lock`]): it waits in the
    /// key's line, behind the readers and writers that came first.
    ///
    /// # Errors
    /// [`crate::Error::Timeout`] or [`crate::Error::Cancelled`] when the
    /// context ends first; the waiter's entry is removed before the error is
    /// returned (should the backend not answer within its request timeout,
    /// the removal goes on in the background);
    /// [`crate::Error::InvalidKey`] for a bad key; backend errors.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future removes the waiter's queue entry (and
    /// releases the lock if it was granted meanwhile) in the background.
    async fn lock(&self, ctx: &Context, key: &Key) -> Result<LockGuard>;

    /// Waits until `key` is held for reading: with other readers, once no
    /// writer holds it or waits ahead (see [`Locker::write_lock`]).
    /// Readers and writers of a key are granted in arrival order, whether
    /// the locker is fair or not.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> fairlock::Result<()> {
    /// use fairlock::{Context, Key, Locker, memory::MemoryStore};
    ///
    /// let store = MemoryStore::new();
    /// let (a, b) = (store.locker(true), store.locker(true));
    /// let key = Key::from("catalog");
    /// let r1 = a.read_lock(&Context::background(), &key).await?;
    /// let r2 = b.read_lock(&Context::background(), &key).await?; // readers share
    /// assert!(b.try_write_lock(&key).await?.is_none()); // a writer waits for them
    /// r1.unlock().await?;
    /// r2.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Locker::lock`]; [`crate::Error::InvalidKey`] when `key` is in
    /// use as a semaphore: give each kind of lock its own keys;
    /// [`crate::Error::Unsupported`] from a backend without read/write
    /// locks (Redlock). A key held or awaited as a mutex ([`Locker::lock`])
    /// is waited for: the read lock joins the key's line once the mutex is
    /// free and nobody waits for it (it looks again after pauses of up to
    /// half a second, so a mutex that is never free keeps it out); `lock`
    /// calls after that join the line as writers.
    ///
    /// # Cancel safety
    /// As [`Locker::lock`].
    async fn read_lock(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        let _ = (ctx, key);
        Err(unsupported("read/write locks"))
    }

    /// Takes `key` for reading if that needs no wait: no writer holds it or
    /// waits for it.
    ///
    /// # Errors
    /// As [`Locker::read_lock`].
    ///
    /// # Cancel safety
    /// As [`Locker::try_lock`].
    async fn try_read_lock(&self, key: &Key) -> Result<Option<LockGuard>> {
        let _ = key;
        Err(unsupported("read/write locks"))
    }

    /// Waits until `key` is held for writing: alone, once every reader and
    /// writer ahead of it has released it. It excludes the readers and
    /// writers of [`Locker::read_lock`] and this method. [`Locker::lock`]
    /// of a key in use by readers and writers is this method; of any other
    /// key it is the mutex, which this method waits for as
    /// [`Locker::read_lock`] does.
    ///
    /// # Errors
    /// As [`Locker::read_lock`].
    ///
    /// # Cancel safety
    /// As [`Locker::lock`].
    async fn write_lock(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        let _ = (ctx, key);
        Err(unsupported("read/write locks"))
    }

    /// Takes `key` for writing if that needs no wait: nobody reads, writes
    /// or waits for it.
    ///
    /// # Errors
    /// As [`Locker::read_lock`].
    ///
    /// # Cancel safety
    /// As [`Locker::try_lock`].
    async fn try_write_lock(&self, key: &Key) -> Result<Option<LockGuard>> {
        let _ = key;
        Err(unsupported("read/write locks"))
    }

    /// Waits for `n` of the `limit` permits of the semaphore `key`: at
    /// most `limit` permits are held at a time, granted in arrival order
    /// (in fair mode a request that does not fit yet holds back the ones
    /// behind it). Every user of one key must pass the same limit. The
    /// guard holds its `n` permits, all granted at once (never in part),
    /// until it is unlocked or lost.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> fairlock::Result<()> {
    /// use fairlock::{Context, Key, Locker, memory::MemoryStore};
    ///
    /// let locker = MemoryStore::new().locker(true);
    /// let key = Key::from("gpu-slots");
    /// let one = locker.acquire_permits(&Context::background(), &key, 1, 2).await?;
    /// let two = locker.acquire_permits(&Context::background(), &key, 1, 2).await?;
    /// assert!(locker.try_acquire_permits(&key, 1, 2).await?.is_none()); // both permits taken
    /// one.unlock().await?;
    /// two.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Locker::lock`]; [`crate::Error::InvalidConfig`] for a limit or
    /// `n` of 0, or `n` over the limit; [`crate::Error::InvalidKey`] when
    /// `key` is in use with another limit, as a read/write lock or as a
    /// mutex; [`crate::Error::Unsupported`] from a backend without
    /// semaphores (Redlock).
    ///
    /// # Cancel safety
    /// As [`Locker::lock`].
    async fn acquire_permits(
        &self,
        ctx: &Context,
        key: &Key,
        n: u32,
        limit: u32,
    ) -> Result<LockGuard> {
        let _ = (ctx, key, n, limit);
        Err(unsupported("semaphores"))
    }

    /// Takes `n` of the `limit` permits of the semaphore `key` if that
    /// needs no wait: they fit beside the permits held and nobody waits.
    ///
    /// # Errors
    /// As [`Locker::acquire_permits`].
    ///
    /// # Cancel safety
    /// As [`Locker::try_lock`].
    async fn try_acquire_permits(
        &self,
        key: &Key,
        n: u32,
        limit: u32,
    ) -> Result<Option<LockGuard>> {
        let _ = (key, n, limit);
        Err(unsupported("semaphores"))
    }

    /// Waits until every key of `keys` is held as a mutex, all together:
    /// the guard holds all of them or the call holds none.
    ///
    /// Fair mode joins every key's queue in one step, so that all waiters
    /// of all keys are ordered by one number: per key the queue is in
    /// arrival order (single-key [`Locker::lock`] calls and `lock_all`
    /// calls alike), and the earliest waiter of all is first in each of
    /// its queues, so some caller always makes progress, whatever order
    /// callers name their keys in (no deadlock, no livelock). A key that
    /// comes free before the others stays held for this caller while it
    /// waits for the rest, as its turn in that key's queue. Unfair mode
    /// takes all the keys in one step when all are free, and otherwise
    /// waits for one of them to come free and tries again, holding none
    /// meanwhile.
    ///
    /// Keys named twice count once. How many keys one call may name
    /// depends on the backend (etcd and Redis: 32, see the error).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> fairlock::Result<()> {
    /// use fairlock::{Context, Key, Locker, memory::MemoryStore};
    ///
    /// let locker = MemoryStore::new().locker(true);
    /// let keys = [Key::from("accounts/17"), Key::from("accounts/42")];
    /// let both = locker.lock_all(&Context::background(), &keys).await?;
    /// // ... move the money ...
    /// both.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Locker::lock`] ([`crate::Error::Timeout`] and
    /// [`crate::Error::Cancelled`] once every entry is removed and every
    /// key granted meanwhile released); [`crate::Error::InvalidKey`] for an
    /// empty list, too many keys, a bad key or a key in use as a
    /// read/write lock or semaphore; [`crate::Error::Unsupported`] where
    /// the deployment cannot take several keys in one step (Redlock; keys
    /// of different slots on a Redis Cluster: the error says how to fix it).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future removes its entries and releases
    /// the keys granted meanwhile, in the background.
    async fn lock_all(&self, ctx: &Context, keys: &[Key]) -> Result<MultiGuard> {
        let _ = (ctx, keys);
        Err(unsupported("multi-key locks"))
    }

    /// Takes every key of `keys` in one step if all are free now (in fair
    /// mode: and nobody queues for any of them), else takes none.
    ///
    /// # Errors
    /// As [`Locker::lock_all`].
    ///
    /// # Cancel safety
    /// As [`Locker::try_lock`].
    async fn try_lock_all(&self, keys: &[Key]) -> Result<Option<MultiGuard>> {
        let _ = keys;
        Err(unsupported("multi-key locks"))
    }

    /// Releases a lock taken from this locker; the same as
    /// [`LockGuard::unlock`].
    ///
    /// # Errors
    /// [`crate::Error::LockLost`] if the lock was no longer held; backend
    /// errors.
    ///
    /// # Cancel safety
    /// If the future is dropped (within a tokio runtime) the release goes
    /// on in the background.
    async fn unlock(&self, guard: LockGuard) -> Result<()> {
        guard.unlock().await
    }

    /// Campaigns for `election` with `value` (what followers see): waits
    /// in arrival order, also on an unfair locker, until elected, or until
    /// the context ends. The same as [`crate::Elector::campaign`] on an
    /// elector of this locker's backend.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> fairlock::Result<()> {
    /// use fairlock::{Context, Key, Locker, memory::MemoryStore};
    ///
    /// let locker = MemoryStore::new().locker(true);
    /// let election = Key::from("scheduler");
    /// let leadership = locker.campaign(&Context::background(), &election, b"node-1".to_vec()).await?;
    /// let leader = locker.leader(&election).await?.expect("a leader");
    /// assert_eq!(leader.fencing_token, leadership.fencing_token());
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`crate::Elector::campaign`]; [`crate::Error::Unsupported`] from
    /// a backend without elections (Redlock).
    ///
    /// # Cancel safety
    /// As [`crate::Elector::campaign`]: dropping the future leaves the line,
    /// or resigns, in the background.
    async fn campaign(&self, ctx: &Context, election: &Key, value: Vec<u8>) -> Result<Leadership> {
        let _ = (ctx, election, value);
        Err(unsupported("leader elections"))
    }

    /// Who leads `election` now, or `None` for an empty seat.
    ///
    /// # Errors
    /// As [`crate::Elector::leader`]; [`crate::Error::Unsupported`] from a
    /// backend without elections (Redlock).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn leader(&self, election: &Key) -> Result<Option<Leader>> {
        let _ = election;
        Err(unsupported("leader elections"))
    }

    /// Follows `election`: the stream yields its state when it starts
    /// (`None` for an empty seat), then every change (a new leader, a
    /// proclaimed value, an empty seat) in order. A consumer that falls
    /// behind by more than [`crate::election::elector::BACKLOG`] changes skips the
    /// oldest: it gets the latest state, not an unbounded backlog. Nothing
    /// is read until the stream is first polled; dropping it stops it.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> fairlock::Result<()> {
    /// use fairlock::{Context, Key, Locker, memory::MemoryStore};
    /// use tokio_stream::StreamExt;
    ///
    /// let locker = MemoryStore::new().locker(true);
    /// let election = Key::from("scheduler");
    /// let mut changes = locker.observe(&election);
    /// assert_eq!(changes.next().await.transpose()?, Some(None)); // an empty seat
    /// let leadership = locker.campaign(&Context::background(), &election, b"n1".to_vec()).await?;
    /// let now = changes.next().await.transpose()?.flatten().expect("a leader");
    /// assert_eq!(now.value, b"n1");
    /// leadership.resign().await?;
    /// assert_eq!(changes.next().await.transpose()?, Some(None));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// The stream yields [`crate::Error::InvalidKey`] for a bad name, the
    /// error of its first read, or an error that ended it for good (then
    /// it ends); [`crate::Error::Unsupported`] from a backend without
    /// elections. Passing outages do not end it.
    fn observe(&self, election: &Key) -> LeaderStream {
        let _ = election;
        crate::election::elector::failed_stream(unsupported("leader elections"))
    }

    /// `true` if this locker grants in arrival order.
    fn is_fair(&self) -> bool;
}

/// The error of a backend without `what`.
fn unsupported(what: &str) -> crate::Error {
    crate::Error::Unsupported(format!(
        "this backend has no {what}; etcd, Redis and the in-memory backend have them"
    ))
}
