//! The mutex of one key in process: its holder and its fair waiters.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::{Notify, oneshot};

/// One key's mutex.
#[derive(Default)]
pub(super) struct KeyState {
    /// (holder id, token)
    pub holder: Option<(u64, u64)>,
    /// Fair waiters in arrival order.
    pub queue: VecDeque<FairWaiter>,
    /// Wakes unfair waiters when the lock becomes free.
    pub freed: Arc<Notify>,
}

/// A fair waiter in a key's queue, granted by sending it the token.
pub(super) struct FairWaiter {
    pub id: u64,
    pub grant: oneshot::Sender<u64>,
}

impl KeyState {
    /// Nobody holds, queues, or waits for it to be freed (an unfair
    /// waiter keeps `freed`: forgetting the key would leave it waiting on
    /// a signal nobody sends).
    pub fn is_idle(&self) -> bool {
        self.holder.is_none() && self.queue.is_empty() && Arc::strong_count(&self.freed) == 1
    }

    /// Nobody holds it (and, with `fair`, nobody is queued).
    pub fn is_free(&self, fair: bool) -> bool {
        self.holder.is_none() && (!fair || self.queue.is_empty())
    }

    /// Takes the lock for `id` if it is free (and, with `fair`, nobody is
    /// queued): the token, from `revision`.
    pub fn take_if_free(&mut self, id: u64, fair: bool, revision: &mut u64) -> Option<u64> {
        if !self.is_free(fair) {
            return None;
        }
        *revision += 1;
        self.holder = Some((id, *revision));
        Some(*revision)
    }

    /// Releases `id`'s hold, handing the lock to the first fair waiter
    /// still waiting or waking the unfair ones; `false` if `id` did not
    /// hold it.
    pub fn release(&mut self, id: u64, revision: &mut u64) -> bool {
        if self.holder.map(|(h, _)| h) != Some(id) {
            return false;
        }
        self.holder = None;
        while let Some(w) = self.queue.pop_front() {
            *revision += 1;
            if w.grant.send(*revision).is_ok() {
                self.holder = Some((w.id, *revision));
                return true;
            }
        }
        self.freed.notify_waiters();
        true
    }
}
