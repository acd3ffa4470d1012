//! Queue entry names a locker reuses, so that its waits do not leave a new
//! key name behind in etcd's index each time (see `protocol/keys.rs`).
//!
//! A waiting attempt takes the lowest free slot number for its lock key;
//! its queue key is `<locker id>/<f|u><slot>`. The slot goes back to the
//! pool only once etcd confirmed that the key is deleted ([`Slot::free`]):
//! a write that got no answer may still be applied later, so a slot whose
//! last write is in doubt is retired for the locker's lifetime instead
//! (the default when a [`Slot`] is dropped). Everything that writes another
//! locker's queue key first compares its create revision, so a reused name
//! is never mistaken for its earlier use.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// The slots in use and retired, per lock key, of one locker.
#[derive(Default)]
pub(crate) struct Slots {
    by_lock: Mutex<HashMap<Vec<u8>, Used>>,
}

#[derive(Default)]
struct Used {
    busy: BTreeSet<u32>,
    retired: BTreeSet<u32>,
}

impl Used {
    fn is_empty(&self) -> bool {
        self.busy.is_empty() && self.retired.is_empty()
    }
}

/// What becomes of a slot given back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Afterwards {
    /// Its queue key is known deleted: the name may be used again.
    Reuse,
    /// A write to its queue key is in doubt: never use the name again.
    Retire,
}

/// One attempt's slot: freed explicitly once its queue key is known
/// deleted, retired when dropped otherwise.
pub(crate) struct Slot {
    slots: Arc<Slots>,
    lock: Vec<u8>,
    number: u32,
    /// What becomes of it when dropped.
    afterwards: Afterwards,
}

impl Slots {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<Vec<u8>, Used>) -> T) -> T {
        f(&mut self.by_lock.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The lowest slot neither in use nor retired, for lock key `lock`.
    pub fn take(self: &Arc<Self>, lock: &[u8]) -> Slot {
        let number = self.with(|all| {
            let used = all.entry(lock.to_vec()).or_default();
            let number = (0..)
                .find(|n| !used.busy.contains(n) && !used.retired.contains(n))
                .unwrap_or(u32::MAX);
            used.busy.insert(number);
            number
        });
        Slot {
            slots: Arc::clone(self),
            lock: lock.to_vec(),
            number,
            afterwards: Afterwards::Retire,
        }
    }

    /// Slots in use or retired for `lock` (for tests).
    #[cfg(test)]
    fn count(&self, lock: &[u8]) -> (usize, usize) {
        self.with(|all| {
            all.get(lock)
                .map_or((0, 0), |u| (u.busy.len(), u.retired.len()))
        })
    }

    fn give_back(&self, lock: &[u8], number: u32, then: Afterwards) {
        self.with(|all| {
            if let Some(used) = all.get_mut(lock) {
                used.busy.remove(&number);
                if then == Afterwards::Retire {
                    used.retired.insert(number);
                }
                if used.is_empty() {
                    all.remove(lock);
                }
            }
        });
    }
}

impl Slot {
    /// The slot number, part of the queue key's name.
    pub fn number(&self) -> u32 {
        self.number
    }

    /// Returns the slot for reuse: its queue key is deleted, and no write
    /// that could create it again is in doubt.
    pub fn free(mut self) {
        self.afterwards = Afterwards::Reuse;
    }
}

impl Drop for Slot {
    /// Gives the slot back: for reuse once [`Slot::free`] said so, retired
    /// otherwise.
    fn drop(&mut self) {
        self.slots
            .give_back(&self.lock, self.number, self.afterwards);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_slots_are_reused_and_retired_ones_are_not() {
        let slots = Arc::new(Slots::default());
        let (a, b) = (slots.take(b"k"), slots.take(b"k"));
        assert_eq!((a.number(), b.number()), (0, 1));
        let other = slots.take(b"other");
        assert_eq!(other.number(), 0, "per lock key");
        other.free();
        a.free();
        let c = slots.take(b"k");
        assert_eq!(c.number(), 0, "a freed slot is reused");
        drop(b); // in doubt: retired
        assert_eq!(slots.count(b"k"), (1, 1));
        let d = slots.take(b"k");
        assert_eq!(d.number(), 2, "a retired slot is not reused");
        c.free();
        d.free();
        assert_eq!(slots.count(b"k"), (0, 1), "the retired slot is remembered");
        assert_eq!(slots.count(b"other"), (0, 0), "idle keys cost nothing");
        assert_eq!(
            Arc::strong_count(&slots),
            1,
            "a slot given back, freed or retired, holds nothing of the pool"
        );
    }
}
