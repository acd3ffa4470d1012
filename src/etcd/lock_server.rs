//! How etcd serves each [`LockServer`] call: the mutex is `lock/`, or
//! `etcd_layout/` in etcd's own layout; read/write locks and semaphores
//! are the line of `line/`; elections are `election/`, on a fair locker of
//! the same connection. What etcd's layout cannot hold is refused here,
//! before any request.

use super::config::Layout;
use super::election::elector::EtcdElector;
use super::etcd_layout::calls;
use super::line::join;
use super::lock::etcd_locker::EtcdLocker;
use super::protocol::take_all;
use crate::semantics::admission::Share;
use crate::semantics::all_keys::KeyLimit;
use crate::semantics::dispatch::{LockServer, Want, impl_locker};
use crate::semantics::fairness::Fairness;
use crate::util::observe::Site;
use crate::{Context, Error, Key, LockGuard, Result};

impl LockServer for EtcdLocker {
    type Elector = EtcdElector;

    fn fairness(&self) -> Fairness {
        self.inner().fairness
    }

    fn site(&self) -> Site {
        self.inner().site()
    }

    /// etcd's layout holds fair mutexes only: its recipe grants the
    /// oldest contender, and it has no lines.
    fn admits(&self, _key: &Key, want: Want) -> Result<()> {
        if self.inner().config.layout() != Layout::Etcd {
            return Ok(());
        }
        if !self.inner().fairness.is_fair() {
            return Err(Error::Unsupported(
                "an unfair lock in etcd's layout: etcd's recipe grants the oldest \
                 contender only; use a fair locker, or the fairlock layout"
                    .into(),
            ));
        }
        match want {
            Want::Mutex => Ok(()),
            Want::Line(_) => Err(Error::Unsupported(
                "read/write locks and semaphores in etcd's layout: etcd's recipes have \
                 none that fairlock shares; use the fairlock layout"
                    .into(),
            )),
        }
    }

    fn admits_all(&self, _keys: &[Key]) -> Result<()> {
        match self.inner().config.layout() {
            Layout::Etcd => Err(Error::Unsupported(
                "lock_all in etcd's layout: not built yet; use the fairlock layout".into(),
            )),
            _ => Ok(()),
        }
    }

    async fn lock_mutex(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        match self.inner().config.layout() {
            Layout::Etcd => calls::lock(self.state(), ctx, key).await,
            _ => self.lock_in_queue(ctx, key).await,
        }
    }

    async fn try_lock_mutex(&self, key: &Key) -> Result<Option<LockGuard>> {
        match self.inner().config.layout() {
            Layout::Etcd => calls::try_lock(self.state(), key).await,
            _ => self.try_lock_now(key).await,
        }
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
