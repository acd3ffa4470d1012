//! Read/write locks and semaphores in process: a line per key, in arrival
//! order, whose first entries hold by the rule of `crate::semantics::admission`.

use std::collections::VecDeque;

use tokio::sync::oneshot;

use crate::semantics::admission::{Share, conflict, holders};
use crate::{Error, Key};

/// A key's line of readers, writers or permits.
#[derive(Default)]
pub(super) struct Line {
    entries: VecDeque<Entry>,
}

pub(super) struct Entry {
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

    /// Why `want` may not join this line of `key` (see [`conflict`]).
    pub(super) fn refuses(&self, key: &Key, want: Share) -> Option<Error> {
        let first = self.entries.front()?;
        conflict(key, want, first.share)
    }

    /// Joins entry `id` as `share`: its token if it holds at once, and the
    /// receiver of the token otherwise.
    pub(super) fn join(
        &mut self,
        id: u64,
        share: Share,
        revision: &mut u64,
    ) -> (Option<u64>, oneshot::Receiver<u64>) {
        let (tx, rx) = oneshot::channel();
        self.entries.push_back(Entry {
            id,
            share,
            token: None,
            grant: Some(tx),
        });
        self.admit(revision);
        let token = self
            .entries
            .back()
            .filter(|e| e.id == id)
            .and_then(|e| e.token);
        (token, rx)
    }

    /// Removes entry `id` and grants who may hold now; `false` if it was
    /// not there.
    pub(super) fn leave(&mut self, id: u64, revision: &mut u64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.id != id);
        let found = self.entries.len() < before;
        self.admit(revision);
        found
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
