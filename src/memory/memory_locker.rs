//! [`MemoryLocker`]: the `Locker` of a [`MemoryStore`], its guards, and the
//! waits of `lock`, `read_lock`, `write_lock` and `acquire_permits`.

use async_trait::async_trait;

use std::sync::Arc;

use super::election::MemoryElector;
use super::store::{Enqueued, MemoryStore, lost};
use crate::semantics::admission::Share;
use crate::semantics::fairness::Fairness;
use crate::semantics::mixed_use::{after_the_mutex, none_while_the_mutex, or_write_lock};
use crate::util::observe::{self, Site};
use crate::{
    Context, Elector, GuardRelease, Key, Leader, LeaderStream, Leadership, LockGuard, Locker,
    Result, leader_stream,
};

impl MemoryStore {
    /// A locker on this store, fair (arrival order) or unfair.
    #[must_use]
    pub fn locker(&self, fair: bool) -> MemoryLocker {
        MemoryLocker {
            store: self.clone(),
            fairness: Fairness::from_fair(fair),
        }
    }
}

impl MemoryStore {
    /// An elector on this store (see [`MemoryElector`]): electors of one
    /// store (or its clones) take part in the same elections.
    #[must_use]
    pub fn elector(&self) -> MemoryElector {
        MemoryElector::new(Arc::new(self.locker(true)), Arc::clone(&self.elections))
    }
}

/// A fair or unfair locker on a [`MemoryStore`].
#[derive(Clone)]
pub struct MemoryLocker {
    store: MemoryStore,
    fairness: Fairness,
}

/// What a guard gives back: a mutex, or an entry of a line.
#[derive(Clone, Copy)]
enum Held {
    Mutex,
    Line,
}

struct MemoryRelease {
    store: MemoryStore,
    key: String,
    id: u64,
    held: Held,
}

#[async_trait]
impl GuardRelease for MemoryRelease {
    async fn release(self: Box<Self>) -> Result<()> {
        match self.held {
            Held::Mutex => self.store.release(&self.key, self.id),
            Held::Line => self.store.leave(&self.key, self.id),
        }
    }
}

/// Takes a waiter out when its caller gives up (releasing what it was
/// granted meanwhile).
struct GiveUp {
    store: MemoryStore,
    key: String,
    id: u64,
    held: Held,
    armed: bool,
}

impl Drop for GiveUp {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        match self.held {
            Held::Mutex => self.store.give_up(&self.key, self.id),
            Held::Line => {
                let _ = self.store.leave(&self.key, self.id);
            }
        }
    }
}

impl MemoryLocker {
    fn site(&self) -> Site {
        Site::new("memory", self.fairness)
    }

    fn guard(&self, key: &Key, id: u64, token: u64, held: Held) -> LockGuard {
        let release = MemoryRelease {
            store: self.store.clone(),
            key: key.to_string(),
            id,
            held,
        };
        LockGuard::new(key.clone(), token, Box::new(release))
    }

    /// Waits for the token `rx` brings to waiter `id`, taking it out (and
    /// releasing what it was granted) if the context ends first or the
    /// future is dropped.
    async fn wait(
        &self,
        ctx: &Context,
        key: &Key,
        (id, held): (u64, Held),
        rx: tokio::sync::oneshot::Receiver<u64>,
    ) -> Result<LockGuard> {
        let mut give_up = GiveUp {
            store: self.store.clone(),
            key: key.to_string(),
            id,
            held,
            armed: true,
        };
        tokio::select! {
            biased;
            granted = rx => {
                let token = granted.map_err(|_| lost(key.as_str()))?;
                give_up.armed = false;
                Ok(self.guard(key, id, token, held))
            }
            err = ctx.done(key.as_str()) => Err(err),
        }
    }

    async fn lock_fair(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        match self.store.enqueue(key.as_str())? {
            Enqueued::Holds(id, token) => Ok(self.guard(key, id, token, Held::Mutex)),
            Enqueued::Waits(id, rx) => self.wait(ctx, key, (id, Held::Mutex), rx).await,
        }
    }

    async fn lock_unfair(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        loop {
            let freed = self.store.freed(key.as_str());
            let notified = freed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some((id, token)) = self.store.take_if_free(key.as_str(), false)? {
                return Ok(self.guard(key, id, token, Held::Mutex));
            }
            tokio::select! {
                biased;
                () = &mut notified => {}
                err = ctx.done(key.as_str()) => return Err(err),
            }
        }
    }

    fn try_shared(&self, key: &Key, share: Share) -> Result<Option<LockGuard>> {
        key.validate()?;
        let (id, token, _) = self.store.join(key, share)?;
        match token {
            Some(token) => Ok(Some(self.guard(key, id, token, Held::Line))),
            None => {
                // It would wait: leave the line at once.
                let _ = self.store.leave(key.as_str(), id);
                Ok(None)
            }
        }
    }

    async fn shared(&self, ctx: &Context, key: &Key, share: Share) -> Result<LockGuard> {
        key.validate()?;
        ctx.check(key.as_str())?;
        match self.store.join(key, share)? {
            (id, Some(token), _) => Ok(self.guard(key, id, token, Held::Line)),
            (id, None, rx) => self.wait(ctx, key, (id, Held::Line), rx).await,
        }
    }
}

#[async_trait]
impl Locker for MemoryLocker {
    async fn try_lock(&self, key: &Key) -> Result<Option<LockGuard>> {
        observe::try_lock(self.site(), key, async {
            key.validate()?;
            let taken = self
                .store
                .take_if_free(key.as_str(), self.fairness.is_fair())
                .map(|taken| taken.map(|(id, token)| self.guard(key, id, token, Held::Mutex)));
            let write = async { none_while_the_mutex(self.try_shared(key, Share::Write)) };
            or_write_lock(taken, write).await
        })
        .await
    }

    async fn lock(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        observe::lock(self.site(), key, async {
            key.validate()?;
            ctx.check(key.as_str())?;
            let locked = match self.fairness {
                Fairness::Fair => self.lock_fair(ctx, key).await,
                Fairness::Unfair => self.lock_unfair(ctx, key).await,
            };
            let write = after_the_mutex(ctx, key, || self.shared(ctx, key, Share::Write));
            or_write_lock(locked, write).await
        })
        .await
    }

    async fn read_lock(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        let read = after_the_mutex(ctx, key, || self.shared(ctx, key, Share::Read));
        observe::lock(self.site(), key, read).await
    }

    async fn try_read_lock(&self, key: &Key) -> Result<Option<LockGuard>> {
        observe::try_lock(self.site(), key, async {
            none_while_the_mutex(self.try_shared(key, Share::Read))
        })
        .await
    }

    async fn write_lock(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        let write = after_the_mutex(ctx, key, || self.shared(ctx, key, Share::Write));
        observe::lock(self.site(), key, write).await
    }

    async fn try_write_lock(&self, key: &Key) -> Result<Option<LockGuard>> {
        observe::try_lock(self.site(), key, async {
            none_while_the_mutex(self.try_shared(key, Share::Write))
        })
        .await
    }

    async fn acquire_permits(
        &self,
        ctx: &Context,
        key: &Key,
        n: u32,
        limit: u32,
    ) -> Result<LockGuard> {
        observe::lock(self.site(), key, async {
            self.shared(ctx, key, Share::permits(n, limit)?).await
        })
        .await
    }

    async fn try_acquire_permits(
        &self,
        key: &Key,
        n: u32,
        limit: u32,
    ) -> Result<Option<LockGuard>> {
        observe::try_lock(self.site(), key, async {
            self.try_shared(key, Share::permits(n, limit)?)
        })
        .await
    }

    async fn campaign(&self, ctx: &Context, election: &Key, value: Vec<u8>) -> Result<Leadership> {
        self.store.elector().campaign(ctx, election, &value).await
    }

    async fn leader(&self, election: &Key) -> Result<Option<Leader>> {
        self.store.elector().leader(election).await
    }

    fn observe(&self, election: &Key) -> LeaderStream {
        let (elector, election) = (self.store.elector(), election.clone());
        leader_stream(async move { elector.observe(&election).await })
    }

    fn is_fair(&self) -> bool {
        self.fairness.is_fair()
    }
}
