//! The [`Locker`] trait on etcd: which concern serves each call. The mutex
//! (`lock`, `try_lock`) is `lock/`; read/write locks and semaphores are the
//! line of `line/`; elections are `election/`, on a fair locker of the
//! same connection.

use async_trait::async_trait;

use super::election::elector::EtcdElector;
use super::line::join;
use super::lock::etcd_locker::EtcdLocker;
use crate::semantics::admission::Share;
use crate::semantics::mixed_use::{after_the_mutex, none_while_the_mutex, or_write_lock};
use crate::util::observe;
use crate::{
    Context, Elector, Key, Leader, LeaderStream, Leadership, LockGuard, Locker, Result,
    leader_stream,
};

#[async_trait]
impl Locker for EtcdLocker {
    async fn try_lock(&self, key: &Key) -> Result<Option<LockGuard>> {
        let take = async {
            let taken = self.try_lock_unobserved(key).await;
            let write = async {
                none_while_the_mutex(join::try_acquire(self.state(), key, Share::Write).await)
            };
            or_write_lock(taken, write).await
        };
        observe::try_lock(self.site(), key, take).await
    }

    async fn lock(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        let wait = async {
            let locked = self.lock_unobserved(ctx, key).await;
            let write = after_the_mutex(ctx, key, || {
                join::acquire(self.state(), ctx, key, Share::Write)
            });
            or_write_lock(locked, write).await
        };
        observe::lock(self.site(), key, wait).await
    }

    async fn read_lock(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        let line = after_the_mutex(ctx, key, || {
            join::acquire(self.state(), ctx, key, Share::Read)
        });
        observe::lock(self.site(), key, line).await
    }

    async fn try_read_lock(&self, key: &Key) -> Result<Option<LockGuard>> {
        let line =
            async { none_while_the_mutex(join::try_acquire(self.state(), key, Share::Read).await) };
        observe::try_lock(self.site(), key, line).await
    }

    async fn write_lock(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        let line = after_the_mutex(ctx, key, || {
            join::acquire(self.state(), ctx, key, Share::Write)
        });
        observe::lock(self.site(), key, line).await
    }

    async fn try_write_lock(&self, key: &Key) -> Result<Option<LockGuard>> {
        let line = async {
            none_while_the_mutex(join::try_acquire(self.state(), key, Share::Write).await)
        };
        observe::try_lock(self.site(), key, line).await
    }

    async fn acquire_permits(
        &self,
        ctx: &Context,
        key: &Key,
        n: u32,
        limit: u32,
    ) -> Result<LockGuard> {
        let line = async { join::acquire(self.state(), ctx, key, Share::permits(n, limit)?).await };
        observe::lock(self.site(), key, line).await
    }

    async fn try_acquire_permits(
        &self,
        key: &Key,
        n: u32,
        limit: u32,
    ) -> Result<Option<LockGuard>> {
        let line = async { join::try_acquire(self.state(), key, Share::permits(n, limit)?).await };
        observe::try_lock(self.site(), key, line).await
    }

    async fn campaign(&self, ctx: &Context, election: &Key, value: Vec<u8>) -> Result<Leadership> {
        self.candidate().campaign(ctx, election, &value).await
    }

    async fn leader(&self, election: &Key) -> Result<Option<Leader>> {
        EtcdElector::of(self.clone()).leader(election).await
    }

    fn observe(&self, election: &Key) -> LeaderStream {
        let (elector, election) = (EtcdElector::of(self.clone()), election.clone());
        leader_stream(async move { elector.observe(&election).await })
    }

    fn is_fair(&self) -> bool {
        self.inner().fairness.is_fair()
    }
}

impl EtcdLocker {
    /// An elector for this locker's campaigns: this locker if it is fair,
    /// else a fair one on its connection with a session of its own.
    fn candidate(&self) -> EtcdElector {
        if self.inner().fairness.is_fair() {
            EtcdElector::of(self.clone())
        } else {
            self.elector()
        }
    }
}
