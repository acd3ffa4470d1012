//! How etcd serves each [`LockServer`] call: the mutex is `lock/`;
//! read/write locks and semaphores are the line of `line/`; elections are
//! `election/`, on a fair locker of the same connection.

use super::election::elector::EtcdElector;
use super::line::join;
use super::lock::etcd_locker::EtcdLocker;
use super::protocol::take_all;
use crate::semantics::admission::Share;
use crate::semantics::all_keys::KeyLimit;
use crate::semantics::dispatch::{LockServer, impl_locker};
use crate::semantics::fairness::Fairness;
use crate::util::observe::Site;
use crate::{Context, Key, LockGuard, Result};

impl LockServer for EtcdLocker {
    type Elector = EtcdElector;

    fn fairness(&self) -> Fairness {
        self.inner().fairness
    }

    fn site(&self) -> Site {
        self.inner().site()
    }

    async fn lock_mutex(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        self.lock_in_queue(ctx, key).await
    }

    async fn try_lock_mutex(&self, key: &Key) -> Result<Option<LockGuard>> {
        self.try_lock_now(key).await
    }

    fn key_limit(&self) -> KeyLimit {
        KeyLimit {
            keys: take_all::MAX_KEYS,
            bytes: take_all::MAX_KEY_BYTES,
            why: "one etcd txn takes them all, and etcd's --max-txn-ops (128 by default) \
                  caps its compares at 3 per key; its request size caps the bytes",
        }
    }

    async fn lock_mutexes(&self, ctx: &Context, keys: &[Key]) -> Result<Vec<LockGuard>> {
        self.lock_all_in_queue(ctx, keys).await
    }

    async fn try_lock_mutexes(&self, keys: &[Key]) -> Result<Option<Vec<LockGuard>>> {
        self.try_lock_all_now(keys).await
    }

    async fn join_line(&self, ctx: &Context, key: &Key, share: Share) -> Result<LockGuard> {
        join::acquire(self.state(), ctx, key, share).await
    }

    async fn try_join_line(&self, key: &Key, share: Share) -> Result<Option<LockGuard>> {
        join::try_acquire(self.state(), key, share).await
    }

    /// This locker if it is fair, else a fair one on its connection with a
    /// session of its own.
    fn candidate(&self) -> EtcdElector {
        if self.inner().fairness.is_fair() {
            EtcdElector::of(self.clone())
        } else {
            self.elector()
        }
    }

    fn reader(&self) -> EtcdElector {
        EtcdElector::of(self.clone())
    }
}

impl_locker!(EtcdLocker);
