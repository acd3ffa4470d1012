//! Read/write locks and semaphores in process: a line per key, in arrival
//! order, whose first entries hold by the rule of `crate::shared`.

use std::collections::VecDeque;

use async_trait::async_trait;
use tokio::sync::oneshot;

use super::{MemoryLocker, MemoryStore, StoreState, lost};
use crate::shared::{Share, conflict, holders};
use crate::{Context, Error, GuardRelease, Key, LockGuard, Result};

/// A key's line of readers, writers or permits.
#[derive(Default)]
pub(super) struct Line {
    entries: VecDeque<Entry>,
}

struct Entry {
    id: u64,
    share: Share,
    /// Set once it holds.
    token: Option<u64>,
    /// Tells a waiting caller its token.
    grant: Option<oneshot::Sender<u64>>,
}

impl Line {
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many callers are in the line, holding or waiting.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Grants every entry that may hold now and does not yet; an entry
    /// whose caller is gone is dropped.
    fn admit(&mut self, revision: &mut u64) {
        loop {
            let holding = holders(self.entries.iter().map(|e| e.share));
            let mut gone = None;
            for (i, e) in self.entries.iter_mut().take(holding).enumerate() {
                if e.token.is_some() {
                    continue;
                }
                *revision += 1;
                e.token = Some(*revision);
                if let Some(grant) = e.grant.take()
                    && grant.send(*revision).is_err()
                {
                    gone = Some(i);
                    break;
                }
            }
            match gone {
                Some(i) => drop(self.entries.remove(i)),
                None => return,
            }
        }
    }
}

impl StoreState {
    /// `key`'s line, refusing `want` where it cannot join (see
    /// [`conflict`]), or where `key` is used as a mutex.
    fn line_for(&mut self, key: &Key, want: Share) -> Result<&mut Line> {
        if self.keys.contains_key(key.as_str()) {
            return Err(Error::InvalidKey {
                key: key.to_string(),
                reason: format!(
                    "it is in use as a mutex (lock), so it cannot be used as {}; give each \
                     lock a key of its own",
                    want.describe()
                ),
            });
        }
        let line = self.lines.entry(key.to_string()).or_default();
        if let Some(err) = line
            .entries
            .front()
            .and_then(|first| conflict(key, want, first.share))
        {
            return Err(err);
        }
        Ok(line)
    }
}

impl MemoryStore {
    /// Removes entry `id` from `key`'s line and grants who may hold now.
    /// `Err` if it held and was not there any more (never, in process).
    fn leave(&self, key: &str, id: u64) -> Result<()> {
        let mut state = self.state();
        let StoreState {
            revision, lines, ..
        } = &mut *state;
        let Some(line) = lines.get_mut(key) else {
            return Err(lost(key));
        };
        let before = line.entries.len();
        line.entries.retain(|e| e.id != id);
        let found = line.entries.len() < before;
        line.admit(revision);
        if line.is_empty() {
            lines.remove(key);
        }
        if found { Ok(()) } else { Err(lost(key)) }
    }
}

/// Releases a shared holding.
struct SharedRelease {
    store: MemoryStore,
    key: String,
    id: u64,
}

#[async_trait]
impl GuardRelease for SharedRelease {
    async fn release(self: Box<Self>) -> Result<()> {
        self.store.leave(&self.key, self.id)
    }
}

/// Takes a waiting entry out of its line when its caller gives up.
struct Leave {
    store: MemoryStore,
    key: String,
    id: u64,
    armed: bool,
}

impl Drop for Leave {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.store.leave(&self.key, self.id);
        }
    }
}

impl MemoryLocker {
    fn shared_guard(&self, key: &Key, id: u64, token: u64) -> LockGuard {
        let release = SharedRelease {
            store: self.store.clone(),
            key: key.to_string(),
            id,
        };
        LockGuard::new(key.clone(), token, Box::new(release))
    }

    /// Joins `key`'s line as `share`: its entry id, its token if it holds
    /// at once, and the receiver of the token otherwise.
    fn join(&self, key: &Key, share: Share) -> Result<(u64, Option<u64>, oneshot::Receiver<u64>)> {
        let mut state = self.store.state();
        state.next_id += 1;
        let id = state.next_id;
        let mut revision = state.revision;
        let line = state.line_for(key, share)?;
        let (tx, rx) = oneshot::channel();
        line.entries.push_back(Entry {
            id,
            share,
            token: None,
            grant: Some(tx),
        });
        line.admit(&mut revision);
        let token = line
            .entries
            .back()
            .filter(|e| e.id == id)
            .and_then(|e| e.token);
        state.revision = revision;
        Ok((id, token, rx))
    }

    pub(super) fn try_shared(&self, key: &Key, share: Share) -> Result<Option<LockGuard>> {
        key.validate()?;
        let (id, token, _) = self.join(key, share)?;
        match token {
            Some(token) => Ok(Some(self.shared_guard(key, id, token))),
            None => {
                // It would wait: leave the line at once.
                let _ = self.store.leave(key.as_str(), id);
                Ok(None)
            }
        }
    }

    pub(super) async fn shared(&self, ctx: &Context, key: &Key, share: Share) -> Result<LockGuard> {
        key.validate()?;
        ctx.check(key.as_str())?;
        let (id, token, rx) = self.join(key, share)?;
        if let Some(token) = token {
            return Ok(self.shared_guard(key, id, token));
        }
        let mut leave = Leave {
            store: self.store.clone(),
            key: key.to_string(),
            id,
            armed: true,
        };
        tokio::select! {
            biased;
            granted = rx => {
                let token = granted.map_err(|_| lost(key.as_str()))?;
                leave.armed = false;
                Ok(self.shared_guard(key, id, token))
            }
            err = ctx.done(key.as_str()) => Err(err),
        }
    }
}
