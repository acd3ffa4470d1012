//! What a locker last read of the head of each queue: the waiters a
//! successor lookup returned beyond the few it needed, kept for the
//! locker's next holders of that lock.
//!
//! etcd reads every entry of a queue to answer a lookup, whatever its
//! limit (the create-revision sort and filter defeat it: see
//! `protocol/queue.rs`), so a lookup costs etcd O(queue length). A fair
//! grant passes [`LOOKAHEAD`] waiters along, so one holder in
//! `LOOKAHEAD - 1` looked up: with 10,000 waiters, a lookup of 10,000
//! entries every third handoff. The lookup now returns up to [`KEEP`]
//! waiters; the locker keeps them, and its next holder, whose own queue
//! entry was first in line, knows that every live waiter queued after it:
//! the kept waiters after its entry are the line behind it. One of them
//! that left is caught by the release's compare on its create revision,
//! as a passed-along one is, and the kept list is dropped.
//!
//! [`LOOKAHEAD`]: crate::etcd::protocol::queue::LOOKAHEAD

use std::collections::HashMap;
use std::sync::Mutex;

use crate::etcd::protocol::keys::Successor;

/// How many waiters one lookup returns, and a locker keeps per queue.
pub(crate) const KEEP: usize = 256;

/// How many queues a locker keeps heads of (beyond it, it forgets all).
const QUEUES: usize = 1024;

/// A locker's kept queue heads, by queue prefix.
#[derive(Default)]
pub(crate) struct QueueHeads(Mutex<HashMap<Vec<u8>, Vec<Successor>>>);

impl QueueHeads {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Vec<Successor>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Up to `n` kept waiters of `queue` queued after revision `after`, in
    /// line order; none if none is kept.
    pub fn after(&self, queue: &[u8], after: i64, n: usize) -> Vec<Successor> {
        let mut map = self.map();
        let Some(kept) = map.get_mut(queue) else {
            return Vec::new();
        };
        kept.retain(|s| s.create_revision > after);
        if kept.is_empty() {
            map.remove(queue);
            return Vec::new();
        }
        kept.iter().take(n).cloned().collect()
    }

    /// Keeps `waiters`, read in line order from the head of `queue`.
    pub fn keep(&self, queue: &[u8], waiters: &[Successor]) {
        let mut map = self.map();
        if map.len() >= QUEUES && !map.contains_key(queue) {
            map.clear();
        }
        map.insert(queue.to_vec(), waiters.to_vec());
    }

    /// Forgets what is kept of `queue` (a waiter in it was gone).
    pub fn forget(&self, queue: &[u8]) {
        self.map().remove(queue);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(rev: i64) -> Successor {
        Successor {
            key: format!("q/{rev}").into_bytes(),
            create_revision: rev,
            lease: 1,
            value: Vec::new(),
        }
    }

    #[test]
    fn the_line_behind_a_holder_is_the_kept_waiters_after_it() {
        let heads = QueueHeads::default();
        heads.keep(b"q/", &[waiter(10), waiter(11), waiter(12), waiter(13)]);
        let revs = |v: Vec<Successor>| v.iter().map(|s| s.create_revision).collect::<Vec<_>>();
        assert_eq!(revs(heads.after(b"q/", 10, 2)), vec![11, 12]);
        assert_eq!(revs(heads.after(b"q/", 12, 2)), vec![13]);
        assert!(heads.after(b"q/", 13, 2).is_empty());
        assert!(heads.after(b"other/", 0, 2).is_empty());
        heads.keep(b"q/", &[waiter(20)]);
        heads.forget(b"q/");
        assert!(heads.after(b"q/", 0, 2).is_empty());
    }
}
