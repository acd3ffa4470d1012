//! [`MemoryLocker`]: the `Locker` of a [`MemoryStore`], its guards, and the
//! waits of `lock`, `read_lock`, `write_lock` and `acquire_permits`.

use async_trait::async_trait;

use std::sync::Arc;
use std::time::Duration;

use super::election::MemoryElector;
use super::store::{Enqueued, MemoryStore, lost};
use futures_util::future::select_all;

use crate::semantics::admission::Share;
use crate::semantics::all_keys::{KeyLimit, every_turn};
use crate::semantics::armed::{Armed, TakeBack, turn_or_done};
use crate::semantics::dispatch::{LockServer, impl_locker};
use crate::semantics::fairness::Fairness;
use crate::util::observe::Site;
use crate::{Context, GuardRelease, Key, LockGuard, Result};

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
/// granted meanwhile): at once, the store being in this process.
struct GiveUp {
    store: MemoryStore,
    key: String,
    id: u64,
    held: Held,
}

impl TakeBack for GiveUp {
    fn take_back(&mut self) -> impl Future<Output = ()> + Send + 'static {
        match self.held {
            Held::Mutex => self.store.give_up(&self.key, self.id),
            Held::Line => {
                let _ = self.store.leave(&self.key, self.id);
            }
        }
        std::future::ready(())
    }
}

impl MemoryLocker {
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
        let give_up = self.give_up(key, id, held);
        self.turn(ctx, key, give_up, rx).await
    }

    /// Waiter `id`, armed to be taken out when its caller gives up.
    fn give_up(&self, key: &Key, id: u64, held: Held) -> Armed<GiveUp> {
        Armed::new(GiveUp {
            store: self.store.clone(),
            key: key.to_string(),
            id,
            held,
        })
    }

    /// [`MemoryLocker::wait`] for a waiter armed already.
    async fn turn(
        &self,
        ctx: &Context,
        key: &Key,
        mut give_up: Armed<GiveUp>,
        rx: tokio::sync::oneshot::Receiver<u64>,
    ) -> Result<LockGuard> {
        let granted = async { rx.await.map_err(|_| lost(key.as_str())) };
        match turn_or_done(ctx, key, granted).await {
            Ok(token) => {
                give_up.set_armed(false);
                Ok(self.guard(key, give_up.id, token, give_up.held))
            }
            Err(e) => {
                // At once: the store is in this process.
                give_up.abandon(Duration::ZERO).await;
                Err(e)
            }
        }
    }

    /// Fair `lock_all`: every key's queue joined in one step, then each
    /// key's turn. The keys held at once and the waiters are armed before
    /// anything awaits, so a dropped call leaves nothing behind.
    async fn lock_all_fair(&self, ctx: &Context, keys: &[Key]) -> Result<Vec<LockGuard>> {
        let entered = self.store.enqueue_all(keys)?;
        let turns = keys
            .iter()
            .zip(entered)
            .map(|(key, entered)| match entered {
                Enqueued::Holds(id, token) => Ok(self.guard(key, id, token, Held::Mutex)),
                Enqueued::Waits(id, rx) => Err((self.give_up(key, id, Held::Mutex), rx)),
            });
        let turns: Vec<_> = turns
            .zip(keys)
            .map(|(turn, key)| async move {
                match turn {
                    Ok(guard) => Ok(guard),
                    Err((give_up, rx)) => self.turn(ctx, key, give_up, rx).await,
                }
            })
            .collect();
        every_turn(ctx, turns).await
    }

    /// Unfair `lock_all`: all keys in one step once all are free, holding
    /// none while it waits for one of them to come free.
    async fn lock_all_unfair(&self, ctx: &Context, keys: &[Key]) -> Result<Vec<LockGuard>> {
        loop {
            let freed: Vec<_> = keys.iter().map(|k| self.store.freed(k.as_str())).collect();
            let mut notified: Vec<_> = freed.iter().map(|f| Box::pin(f.notified())).collect();
            for n in &mut notified {
                n.as_mut().enable();
            }
            if let Some(taken) = self.store.take_all_if_free(keys, false)? {
                return Ok(self.guards(keys, taken));
            }
            let one_freed = async {
                select_all(notified).await;
                Ok::<_, crate::Error>(())
            };
            if let Err(e) = turn_or_done(ctx, &keys[0], one_freed).await {
                drop(freed);
                self.store.tidy_all(keys);
                return Err(e);
            }
        }
    }

    /// The guards of keys taken in one step by `id`.
    fn guards(&self, keys: &[Key], (id, tokens): (u64, Vec<u64>)) -> Vec<LockGuard> {
        keys.iter()
            .zip(tokens)
            .map(|(key, token)| self.guard(key, id, token, Held::Mutex))
            .collect()
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
            let freed = async {
                notified.as_mut().await;
                Ok::<_, crate::Error>(())
            };
            turn_or_done(ctx, key, freed).await?;
        }
    }
}

impl LockServer for MemoryLocker {
    type Elector = MemoryElector;

    fn fairness(&self) -> Fairness {
        self.fairness
    }

    fn site(&self) -> Site {
        Site::new("memory", self.fairness)
    }

    async fn lock_mutex(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        match self.fairness {
            Fairness::Fair => self.lock_fair(ctx, key).await,
            Fairness::Unfair => self.lock_unfair(ctx, key).await,
        }
    }

    async fn try_lock_mutex(&self, key: &Key) -> Result<Option<LockGuard>> {
        let taken = self
            .store
            .take_if_free(key.as_str(), self.fairness.is_fair())?;
        Ok(taken.map(|(id, token)| self.guard(key, id, token, Held::Mutex)))
    }

    fn key_limit(&self) -> KeyLimit {
        KeyLimit {
            keys: 1024,
            bytes: 1 << 20,
            why: "a bound on one call's work in memory, above every other backend's",
        }
    }

    async fn lock_mutexes(&self, ctx: &Context, keys: &[Key]) -> Result<Vec<LockGuard>> {
        match self.fairness {
            Fairness::Fair => self.lock_all_fair(ctx, keys).await,
            Fairness::Unfair => self.lock_all_unfair(ctx, keys).await,
        }
    }

    async fn try_lock_mutexes(&self, keys: &[Key]) -> Result<Option<Vec<LockGuard>>> {
        let taken = self.store.take_all_if_free(keys, self.fairness.is_fair())?;
        Ok(taken.map(|taken| self.guards(keys, taken)))
    }

    async fn join_line(&self, ctx: &Context, key: &Key, share: Share) -> Result<LockGuard> {
        match self.store.join(key, share)? {
            (id, Some(token), _) => Ok(self.guard(key, id, token, Held::Line)),
            (id, None, rx) => self.wait(ctx, key, (id, Held::Line), rx).await,
        }
    }

    async fn try_join_line(&self, key: &Key, share: Share) -> Result<Option<LockGuard>> {
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

    fn candidate(&self) -> MemoryElector {
        self.store.elector()
    }
}

impl_locker!(MemoryLocker);
