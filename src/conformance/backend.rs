//! [`Backend`]: what the conformance suite needs from the backend under
//! test.

use std::sync::Arc;

use async_trait::async_trait;

use crate::{Key, Locker};

/// A backend under test: a source of lockers on one store (one key prefix,
/// one in-process store, ...) and the views of that store the checks need.
///
/// Give every check a fresh `Backend` of its own (a new key prefix or a new
/// store): the checks reuse key names and assert that the whole store is
/// empty at the end.
///
/// The methods that look at the store read it directly (another connection,
/// the store's own accessors), not through a [`Locker`]: the point is to see
/// what the lockers left behind.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// A new locker on the store, in fair (FIFO) or unfair mode.
    ///
    /// Two lockers from one backend must behave like two processes: each
    /// has its own identity (session, owner id), so they exclude each other
    /// on the same key. They may share a connection.
    fn locker(&self, fair: bool) -> Arc<dyn Locker>;

    /// Returns once at least `n` fair waiters are queued on `key`.
    ///
    /// The checks use it to order arrivals (waiter `i` is queued before
    /// waiter `i + 1` starts), so it must not return early. Wait on the
    /// store's change events, or poll an in-process store between
    /// scheduler turns; never sleep a fixed time. Panic after a long guard
    /// deadline (minutes) rather than hang.
    async fn wait_queued(&self, key: &Key, n: usize);

    /// Returns once nothing is held or queued in the store, for cleanup the
    /// backend does in the background (a dropped guard or `lock` future).
    /// The same rules as [`Backend::wait_queued`]: events, no fixed sleeps,
    /// panic after a long guard deadline.
    async fn wait_clean(&self);

    /// `true` if nothing is held or queued in the store right now.
    ///
    /// One read of the store's current state: no waiting, no retrying. The
    /// checks call it right after an operation that promises to have
    /// cleaned up before returning (a `lock` that timed out or was
    /// cancelled, `try_lock`, `unlock`, a rejected key), so a backend that
    /// waits here would hide a leak that only background cleanup repairs.
    /// What the backend keeps on purpose between locks (a fencing counter,
    /// say) does not count.
    async fn is_clean(&self) -> bool;

    /// Ends a check: closes the lockers this backend handed out and panics
    /// if anything is left behind, in the store (keys, queue entries) or
    /// beside it (sessions, leases, connections the backend can see).
    async fn finish(&self);

    /// `false` for a backend that refuses fair mode (Redlock, say): the
    /// checks that need fair lockers then return at once, and the others
    /// use unfair lockers only.
    fn supports_fair(&self) -> bool {
        true
    }

    /// The most `lock` calls at once that [`a_burst_of_waiters_is_served`]
    /// starts here: no limit, or fewer where each concurrent call of one
    /// locker on one key costs the server a session of its own (etcd's
    /// layout names a contender's key after its lease, as etcd's recipe
    /// does: 1,000 calls are 1,000 leases, each renewed and confirmed).
    ///
    /// [`a_burst_of_waiters_is_served`]: crate::conformance::a_burst_of_waiters_is_served
    fn burst_limit(&self) -> usize {
        usize::MAX
    }

    /// `false` for a backend that refuses unfair mode (etcd's own layout,
    /// where the oldest contender holds): the checks that need unfair
    /// lockers then return at once, and the others use fair lockers only.
    fn supports_unfair(&self) -> bool {
        true
    }

    /// `true` for a backend with read/write locks and semaphores
    /// ([`Locker::read_lock`], [`Locker::acquire_permits`]): their checks run only
    /// then. [`Backend::wait_queued`] then also counts the callers in a
    /// read/write lock's or semaphore's line, holders included.
    fn supports_shared(&self) -> bool {
        false
    }

    /// `true` for a backend with [`Locker::lock_all`]: its checks run
    /// only then. `false` by default, as for a backend of one's own
    /// written before `lock_all` existed.
    fn supports_lock_all(&self) -> bool {
        false
    }

    /// The key the [`Locker::lock_all`] checks call `name`: `name` itself,
    /// unless the backend takes several keys in one step only when they
    /// share something (a Redis Cluster: one hash slot, so a common hash
    /// tag, `{t}name`).
    fn lock_all_key(&self, name: &str) -> Key {
        Key::from(name)
    }
}

/// Whether `b` refuses lockers of this mode (see [`Backend::supports_fair`]
/// and [`Backend::supports_unfair`]): the check then returns at once.
pub(super) fn mode_unsupported(b: &impl Backend, fair: bool) -> bool {
    match fair {
        true => !b.supports_fair(),
        false => !b.supports_unfair(),
    }
}
