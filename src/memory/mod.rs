//! An in-process backend with the same semantics as etcd's, for unit tests.
//!
//! A [`MemoryStore`] is the "server": lockers made from the same store (or
//! its clones) exclude each other. Nothing crosses process boundaries and
//! nothing expires: a lock is held until it is released or its guard dropped.
//!
//! # Examples
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> fairlock::Result<()> {
//! use fairlock::{Context, Key, Locker, memory::MemoryStore};
//!
//! let store = MemoryStore::new();
//! let (a, b) = (store.locker(true), store.locker(true));
//! let guard = a.lock(&Context::background(), &Key::from("k")).await?;
//! assert!(b.try_lock(&Key::from("k")).await?.is_none());
//! guard.unlock().await?;
//! assert!(b.try_lock(&Key::from("k")).await?.is_some());
//! # Ok(()) }
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use tokio::sync::{Notify, oneshot};

use crate::fairness::Fairness;
use crate::observe::{self, Site};
use crate::{Context, Error, GuardRelease, Key, LockGuard, Locker, Result};

/// The shared state lockers of one in-process "cluster" agree on.
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<StoreState>,
    /// The leaders' values and their observers (see `election.rs`).
    elections: Arc<election::Board>,
}

#[derive(Default)]
struct StoreState {
    /// Grows with every grant: the fencing token source.
    revision: u64,
    next_id: u64,
    keys: HashMap<String, KeyState>,
}

#[derive(Default)]
struct KeyState {
    /// (holder id, token)
    holder: Option<(u64, u64)>,
    /// Fair waiters in arrival order.
    queue: VecDeque<FairWaiter>,
    /// Wakes unfair waiters when the lock becomes free.
    freed: Arc<Notify>,
}

/// A fair waiter in a key's queue, granted by sending it the token.
struct FairWaiter {
    id: u64,
    grant: oneshot::Sender<u64>,
}

impl KeyState {
    fn is_idle(&self) -> bool {
        self.holder.is_none() && self.queue.is_empty()
    }
}

impl MemoryStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A locker on this store, fair (arrival order) or unfair.
    #[must_use]
    pub fn locker(&self, fair: bool) -> MemoryLocker {
        MemoryLocker {
            store: self.clone(),
            fairness: Fairness::from_fair(fair),
        }
    }

    /// `true` when no lock is held and nobody waits: what a test checks to
    /// prove nothing was left behind.
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.state().keys.values().all(KeyState::is_idle)
    }

    /// How many fair waiters are queued for `key` (the holder not counted).
    #[must_use]
    pub fn waiting(&self, key: &Key) -> usize {
        self.state()
            .keys
            .get(key.as_str())
            .map_or(0, |ks| ks.queue.len())
    }

    fn state(&self) -> MutexGuard<'_, StoreState> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Releases `id`'s hold on `key`, handing the lock to the first live
    /// fair waiter or waking the unfair ones.
    fn release(&self, key: &str, id: u64) -> Result<()> {
        let mut state = self.state();
        let StoreState { revision, keys, .. } = &mut *state;
        let Some(ks) = keys.get_mut(key) else {
            return Err(lost(key));
        };
        if ks.holder.map(|(h, _)| h) != Some(id) {
            return Err(lost(key));
        }
        ks.holder = None;
        while let Some(w) = ks.queue.pop_front() {
            *revision += 1;
            if w.grant.send(*revision).is_ok() {
                ks.holder = Some((w.id, *revision));
                return Ok(());
            }
        }
        ks.freed.notify_waiters();
        if ks.is_idle() {
            keys.remove(key);
        }
        Ok(())
    }
}

fn lost(key: &str) -> Error {
    Error::LockLost {
        key: key.to_string(),
        reason: "the lock is not held by this guard".to_string(),
    }
}

/// A fair or unfair locker on a [`MemoryStore`].
#[derive(Clone)]
pub struct MemoryLocker {
    store: MemoryStore,
    fairness: Fairness,
}

struct MemoryRelease {
    store: MemoryStore,
    key: String,
    id: u64,
}

#[async_trait]
impl GuardRelease for MemoryRelease {
    async fn release(self: Box<Self>) -> Result<()> {
        self.store.release(&self.key, self.id)
    }
}

/// Removes a fair waiter that gave up; releases the lock if it was granted
/// just before.
struct WaitCleanup {
    store: MemoryStore,
    key: String,
    id: u64,
    armed: bool,
}

impl Drop for WaitCleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let granted = {
            let mut state = self.store.state();
            match state.keys.get_mut(&self.key) {
                Some(ks) => {
                    ks.queue.retain(|w| w.id != self.id);
                    ks.holder.map(|(h, _)| h) == Some(self.id)
                }
                None => false,
            }
        };
        if granted {
            let _ = self.store.release(&self.key, self.id);
        } else {
            let mut state = self.store.state();
            if state.keys.get(&self.key).is_some_and(KeyState::is_idle) {
                state.keys.remove(&self.key);
            }
        }
    }
}

impl MemoryLocker {
    fn site(&self) -> Site {
        Site::new("memory", self.fairness)
    }

    fn guard(&self, key: &Key, id: u64, token: u64) -> LockGuard {
        LockGuard::new(
            key.clone(),
            token,
            Box::new(MemoryRelease {
                store: self.store.clone(),
                key: key.to_string(),
                id,
            }),
        )
    }

    /// Grants at once if free (and, in fair mode, nobody is queued).
    fn take_if_free(&self, key: &str) -> Option<(u64, u64)> {
        let mut state = self.store.state();
        state.next_id += 1;
        let id = state.next_id;
        let StoreState { revision, keys, .. } = &mut *state;
        let ks = keys.entry(key.to_string()).or_default();
        let queue_first = self.fairness.is_fair() && !ks.queue.is_empty();
        if ks.holder.is_none() && !queue_first {
            *revision += 1;
            ks.holder = Some((id, *revision));
            return Some((id, *revision));
        }
        if ks.is_idle() {
            keys.remove(key);
        }
        None
    }

    async fn lock_fair(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        let (rx, mut cleanup) = {
            let mut state = self.store.state();
            state.next_id += 1;
            let id = state.next_id;
            let StoreState { revision, keys, .. } = &mut *state;
            let ks = keys.entry(key.to_string()).or_default();
            if ks.holder.is_none() && ks.queue.is_empty() {
                *revision += 1;
                ks.holder = Some((id, *revision));
                let token = *revision;
                drop(state);
                return Ok(self.guard(key, id, token));
            }
            let (tx, rx) = oneshot::channel();
            ks.queue.push_back(FairWaiter { id, grant: tx });
            observe::queued(Some(ks.queue.len()));
            let cleanup = WaitCleanup {
                store: self.store.clone(),
                key: key.to_string(),
                id,
                armed: true,
            };
            (rx, cleanup)
        };
        tokio::select! {
            biased;
            granted = rx => {
                let token = granted.map_err(|_| lost(key.as_str()))?;
                cleanup.armed = false;
                Ok(self.guard(key, cleanup.id, token))
            }
            err = ctx.done(key.as_str()) => Err(err),
        }
    }

    async fn lock_unfair(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        loop {
            let freed = {
                let mut state = self.store.state();
                Arc::clone(&state.keys.entry(key.to_string()).or_default().freed)
            };
            let notified = freed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some((id, token)) = self.take_if_free(key.as_str()) {
                return Ok(self.guard(key, id, token));
            }
            tokio::select! {
                biased;
                () = &mut notified => {}
                err = ctx.done(key.as_str()) => return Err(err),
            }
        }
    }
}

#[async_trait]
impl Locker for MemoryLocker {
    async fn try_lock(&self, key: &Key) -> Result<Option<LockGuard>> {
        observe::try_lock(self.site(), key, async {
            key.validate()?;
            Ok(self
                .take_if_free(key.as_str())
                .map(|(id, token)| self.guard(key, id, token)))
        })
        .await
    }

    async fn lock(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        observe::lock(self.site(), key, async {
            key.validate()?;
            ctx.check(key.as_str())?;
            match self.fairness {
                Fairness::Fair => self.lock_fair(ctx, key).await,
                Fairness::Unfair => self.lock_unfair(ctx, key).await,
            }
        })
        .await
    }

    fn is_fair(&self) -> bool {
        self.fairness.is_fair()
    }
}

mod election;

pub use election::MemoryElector;

impl MemoryStore {
    /// An elector on this store (see [`MemoryElector`]): electors of one
    /// store (or its clones) take part in the same elections.
    #[must_use]
    pub fn elector(&self) -> MemoryElector {
        MemoryElector::new(
            Arc::new(self.locker(true)),
            Arc::clone(&self.inner.elections),
        )
    }

    /// `true` when no election of this store has a leader: with
    /// [`MemoryStore::is_idle`], what a test checks to prove a leadership
    /// left nothing behind.
    #[must_use]
    pub fn has_no_leaders(&self) -> bool {
        self.inner.elections.has_no_leaders()
    }
}
