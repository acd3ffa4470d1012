//! [`MemoryStore`]: the in-process "server" every memory locker of one
//! store agrees on: each key's mutex (`mutex.rs`) and line of readers,
//! writers or permits (`line.rs`), under one lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, oneshot};

use super::election::Board;
use super::line::Line;
use super::mutex::{FairWaiter, KeyState};
use crate::semantics::admission::Share;
use crate::{Error, Key, Result};

/// The shared state lockers of one in-process "cluster" agree on.
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<StoreState>>,
    /// The leaders' values and their observers (see `election.rs`).
    pub(super) elections: Arc<Board>,
}

#[derive(Default)]
struct StoreState {
    /// Grows with every grant: the fencing token source.
    revision: u64,
    next_id: u64,
    keys: HashMap<String, KeyState>,
    lines: HashMap<String, Line>,
}

impl StoreState {
    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Refuses the mutex of a key in use as a read/write lock or semaphore.
    fn no_line(&self, key: &str) -> Result<()> {
        if !self.lines.contains_key(key) {
            return Ok(());
        }
        Err(crate::semantics::mixed_use::in_use_as_line(key))
    }

    /// Forgets `key`'s mutex once nobody holds or waits.
    fn tidy(&mut self, key: &str) {
        if self.keys.get(key).is_some_and(KeyState::is_idle) {
            self.keys.remove(key);
        }
        if self.lines.get(key).is_some_and(Line::is_empty) {
            self.lines.remove(key);
        }
    }
}

/// How a fair `lock` joined a key's mutex.
pub(super) enum Enqueued {
    /// The lock was free: entry id and token.
    Holds(u64, u64),
    /// Queued: entry id and the receiver of its token.
    Waits(u64, oneshot::Receiver<u64>),
}

impl KeyState {
    /// A fair `lock`'s step on this key for waiter `id`: the lock if it is
    /// free with nobody queued, else a place at the end of the queue.
    fn enter(&mut self, id: u64, revision: &mut u64) -> Enqueued {
        if let Some(token) = self.take_if_free(id, true, revision) {
            return Enqueued::Holds(id, token);
        }
        let (tx, rx) = oneshot::channel();
        self.queue.push_back(FairWaiter { id, grant: tx });
        Enqueued::Waits(id, rx)
    }
}

/// The error of a release of something not held.
pub(super) fn lost(key: &str) -> Error {
    Error::LockLost {
        key: key.to_string(),
        reason: "the lock is not held by this guard".to_string(),
    }
}

impl MemoryStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// `true` when no lock is held and nobody waits: what a test checks to
    /// prove nothing was left behind.
    #[must_use]
    pub fn is_idle(&self) -> bool {
        let state = self.state();
        state.keys.values().all(KeyState::is_idle) && state.lines.is_empty()
    }

    /// How many fair waiters are queued for `key` (the holder not counted),
    /// or, for a read/write lock or semaphore, how many callers are in its
    /// line, holding or waiting.
    #[must_use]
    pub fn waiting(&self, key: &Key) -> usize {
        let state = self.state();
        state.keys.get(key.as_str()).map_or(0, |ks| ks.queue.len())
            + state.lines.get(key.as_str()).map_or(0, Line::len)
    }

    /// `true` when no election of this store has a leader: with
    /// [`MemoryStore::is_idle`], what a test checks to prove a leadership
    /// left nothing behind.
    #[must_use]
    pub fn has_no_leaders(&self) -> bool {
        self.elections.has_no_leaders()
    }

    fn state(&self) -> MutexGuard<'_, StoreState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    // ---- mutexes ----------------------------------------------------------

    /// Takes `key`'s mutex if it is free (and, with `fair`, nobody is
    /// queued): entry id and token.
    /// Refused while `key` is in use as a read/write lock or semaphore.
    pub(super) fn take_if_free(&self, key: &str, fair: bool) -> Result<Option<(u64, u64)>> {
        let mut state = self.state();
        if let Err(e) = state.no_line(key) {
            // An unfair waiter's `freed` made the key's entry: remove it.
            state.tidy(key);
            return Err(e);
        }
        let id = state.next_id();
        let StoreState { revision, keys, .. } = &mut *state;
        let token = keys
            .entry(key.to_string())
            .or_default()
            .take_if_free(id, fair, revision);
        state.tidy(key);
        Ok(token.map(|token| (id, token)))
    }

    /// Takes `key`'s mutex if it is free and nobody is queued, else queues.
    /// Refused while `key` is in use as a read/write lock or semaphore.
    pub(super) fn enqueue(&self, key: &str) -> Result<Enqueued> {
        let mut state = self.state();
        state.no_line(key)?;
        let id = state.next_id();
        let StoreState { revision, keys, .. } = &mut *state;
        let ks = keys.entry(key.to_string()).or_default();
        let entered = ks.enter(id, revision);
        if matches!(entered, Enqueued::Waits(..)) {
            crate::util::observe::queued(Some(ks.queue.len()));
        }
        Ok(entered)
    }

    /// `lock_all`, fair: joins every key's queue in one step under one id
    /// (taking each key that is free with nobody queued), so that all
    /// waiters of all keys are in one order. Refused, with nothing
    /// written, while any key is in use as a read/write lock or semaphore.
    pub(super) fn enqueue_all(&self, keys: &[Key]) -> Result<Vec<Enqueued>> {
        let mut state = self.state();
        for key in keys {
            state.no_line(key.as_str())?;
        }
        let id = state.next_id();
        let StoreState {
            revision,
            keys: all,
            ..
        } = &mut *state;
        let entered = keys
            .iter()
            .map(|key| all.entry(key.to_string()).or_default().enter(id, revision))
            .collect();
        Ok(entered)
    }

    /// `try_lock_all`, and each try of an unfair `lock_all`: takes every
    /// key in one step if all are free (and, with `fair`, nobody is
    /// queued for any), else none: the id and each key's token.
    pub(super) fn take_all_if_free(
        &self,
        keys: &[Key],
        fair: bool,
    ) -> Result<Option<(u64, Vec<u64>)>> {
        let mut state = self.state();
        let refused = keys.iter().find_map(|k| state.no_line(k.as_str()).err());
        let all_free = keys
            .iter()
            .all(|k| state.keys.get(k.as_str()).is_none_or(|ks| ks.is_free(fair)));
        let taken = match (refused, all_free) {
            (Some(e), _) => Err(e),
            (None, false) => Ok(None),
            (None, true) => {
                let id = state.next_id();
                let StoreState {
                    revision,
                    keys: all,
                    ..
                } = &mut *state;
                let tokens = keys
                    .iter()
                    .filter_map(|k| {
                        all.entry(k.to_string())
                            .or_default()
                            .take_if_free(id, fair, revision)
                    })
                    .collect();
                Ok(Some((id, tokens)))
            }
        };
        // An unfair waiter's `freed` made the keys' entries: remove idle ones.
        for key in keys {
            state.tidy(key.as_str());
        }
        taken
    }

    /// Forgets the idle entries of `keys` (an unfair `lock_all` that gave
    /// up made them, waiting for each to come free).
    pub(super) fn tidy_all(&self, keys: &[Key]) {
        let mut state = self.state();
        for key in keys {
            state.tidy(key.as_str());
        }
    }

    /// What unfair waiters of `key` wait on: notified when it is freed.
    pub(super) fn freed(&self, key: &str) -> Arc<Notify> {
        let mut state = self.state();
        Arc::clone(&state.keys.entry(key.to_string()).or_default().freed)
    }

    /// Releases `id`'s hold on `key`'s mutex (see [`KeyState::release`]).
    pub(super) fn release(&self, key: &str, id: u64) -> Result<()> {
        let mut state = self.state();
        let StoreState { revision, keys, .. } = &mut *state;
        let released = keys.get_mut(key).is_some_and(|ks| ks.release(id, revision));
        state.tidy(key);
        if released { Ok(()) } else { Err(lost(key)) }
    }

    /// Takes fair waiter `id` out of `key`'s queue; releases the mutex if
    /// it was granted meanwhile.
    pub(super) fn give_up(&self, key: &str, id: u64) {
        let granted = {
            let mut state = self.state();
            let granted = state.keys.get_mut(key).is_some_and(|ks| {
                ks.queue.retain(|w| w.id != id);
                ks.holder.map(|(h, _)| h) == Some(id)
            });
            state.tidy(key);
            granted
        };
        if granted {
            let _ = self.release(key, id);
        }
    }

    // ---- read/write locks and semaphores ------------------------------------

    /// Joins `key`'s line as `share`: entry id, its token if it holds at
    /// once, and the receiver of the token otherwise. Refused where `share`
    /// may not join (see `crate::semantics::admission::conflict`), or where `key` is in
    /// use as a mutex.
    pub(super) fn join(
        &self,
        key: &Key,
        share: Share,
    ) -> Result<(u64, Option<u64>, oneshot::Receiver<u64>)> {
        let mut state = self.state();
        if state.keys.get(key.as_str()).is_some_and(|ks| !ks.is_idle()) {
            return Err(crate::semantics::mixed_use::in_use_as_mutex(
                key.as_str(),
                share,
            ));
        }
        let id = state.next_id();
        let StoreState {
            revision, lines, ..
        } = &mut *state;
        let line = lines.entry(key.to_string()).or_default();
        if let Some(err) = line.refuses(key, share) {
            state.tidy(key.as_str());
            return Err(err);
        }
        let (token, rx) = line.join(id, share, revision);
        Ok((id, token, rx))
    }

    /// Takes entry `id` out of `key`'s line, granting who may hold now.
    pub(super) fn leave(&self, key: &str, id: u64) -> Result<()> {
        let mut state = self.state();
        let StoreState {
            revision, lines, ..
        } = &mut *state;
        let found = lines.get_mut(key).is_some_and(|l| l.leave(id, revision));
        state.tidy(key);
        if found { Ok(()) } else { Err(lost(key)) }
    }
}
