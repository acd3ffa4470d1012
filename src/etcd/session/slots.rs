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

/// One lock key's slots: every number below `next` is in use, retired or
/// free; the lowest free one (or `next`) is the one a take gets, in
/// O(log n) whatever the number of slots in use.
#[derive(Default)]
struct Used {
    /// How many are in use.
    busy: usize,
    /// Given back for reuse, below `next`.
    free: BTreeSet<u32>,
    retired: BTreeSet<u32>,
    /// The lowest number never taken.
    next: u32,
}

impl Used {
    fn is_empty(&self) -> bool {
        self.busy == 0 && self.retired.is_empty()
    }

    /// The lowest number neither in use nor retired; now in use.
    fn take(&mut self) -> u32 {
        self.busy += 1;
        self.free.pop_first().unwrap_or_else(|| {
            let number = self.next;
            self.next = self.next.saturating_add(1);
            number
        })
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
        let number = self.with(|all| all.entry(lock.to_vec()).or_default().take());
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
        self.with(|all| all.get(lock).map_or((0, 0), |u| (u.busy, u.retired.len())))
    }

    fn give_back(&self, lock: &[u8], number: u32, then: Afterwards) {
        self.with(|all| {
            if let Some(used) = all.get_mut(lock) {
                used.busy = used.busy.saturating_sub(1);
                match then {
                    Afterwards::Reuse => used.free.insert(number),
                    Afterwards::Retire => used.retired.insert(number),
                };
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

    /// Against the rule itself (the lowest number neither in use nor
    /// retired), over a long mix of takes, frees and retirements.
    #[test]
    fn a_take_gets_the_lowest_number_neither_in_use_nor_retired() {
        let slots = Arc::new(Slots::default());
        let (mut held, mut retired) = (Vec::<Slot>::new(), BTreeSet::<u32>::new());
        let mut seed = 7_u64;
        let mut next = |n: usize| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) as usize % n
        };
        for _ in 0..4_000 {
            match next(10) {
                0..=5 => {
                    let lowest = (0..)
                        .find(|n| !retired.contains(n) && !held.iter().any(|s| s.number() == *n))
                        .expect("a number");
                    let slot = slots.take(b"k");
                    assert_eq!(slot.number(), lowest);
                    held.push(slot);
                }
                6..=8 if !held.is_empty() => {
                    let i = next(held.len());
                    held.swap_remove(i).free();
                }
                _ if !held.is_empty() => {
                    let i = next(held.len());
                    retired.insert(held.swap_remove(i).number());
                }
                _ => {}
            }
        }
        assert!(held.len() > 100, "the mix kept many slots in use");
        assert_eq!(slots.count(b"k"), (held.len(), retired.len()));
    }
}
