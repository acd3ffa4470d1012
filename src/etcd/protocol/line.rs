//! The line of a read/write lock or semaphore: where its entries live, what
//! each asks for, and who of it holds (the rule of `crate::semantics::admission`).
//!
//! For prefix `P` and key `k`, beside the mutex's keys (`keys.rs`):
//! - readers `P k/_OWNERS_/r/<locker id>/<slot>`,
//! - writers `P k/_OWNERS_/w/<locker id>/<slot>`,
//! - permits of a semaphore with limit `n` `P k/_OWNERS_/s<n>/<locker id>/<slot>`,
//!   or, for a call that takes `m > 1` permits, `m` keys
//!   `.../<slot>-<i>-<m>` (`i` from 0) put in one txn: each key counts as
//!   one permit, so every count of the line stays a count of permits, and
//!   the call's main key (`i` = 0) is the one it is told on, watched
//!   and fenced by; the others come and go with it,
//!
//! each on its caller's session lease, in line by create revision across
//! the three. One segment per kind keeps each kind a range of its own, so
//! "how many writers are ahead" is one count. A locker id is 32 hex
//! digits: these names never parse as the mutex's queue entries
//! (`<locker id>/<f|u><slot>`), and the mutex skips them as someone
//! else's.

use super::keys::{LockKeys, prefix_end};
use crate::Key;
use crate::semantics::admission::{Admission, Share};

/// The etcd keys of one read/write lock's or semaphore's line.
#[derive(Clone, Debug)]
pub(crate) struct LineKeys {
    /// The mutex's lock key of the same name, which must stay absent.
    pub lock: Vec<u8>,
    /// `P k/_OWNERS_/`: the line's entries are under it.
    pub base: Vec<u8>,
}

/// A key range: `(start, end)`.
pub(crate) type Range = (Vec<u8>, Vec<u8>);

impl LineKeys {
    pub fn new(prefix: &str, key: &Key) -> Self {
        let LockKeys { lock, queue } = LockKeys::new(prefix, key);
        LineKeys { lock, base: queue }
    }

    fn under(&self, rest: &str) -> Vec<u8> {
        let mut k = self.base.clone();
        k.extend_from_slice(rest.as_bytes());
        k
    }

    /// The segment of entries of `share`: `r/`, `w/`, `s<n>/`.
    fn segment(share: Share) -> String {
        match share {
            Share::Read => "r/".into(),
            Share::Write => "w/".into(),
            Share::Permit { limit, .. } => format!("s{limit}/"),
        }
    }

    /// Every entry of `share`'s kind (for permits: of that limit).
    pub fn kind(&self, share: Share) -> Range {
        let start = self.under(&Self::segment(share));
        let end = prefix_end(&start);
        (start, end)
    }

    /// Readers and writers together: `r/` up to the end of `w/` (the
    /// permits' `s...` between them are refused on a read/write lock).
    pub fn readers_and_writers(&self) -> Range {
        (self.under("r/"), prefix_end(&self.under("w/")))
    }

    /// Every permit, of any limit.
    pub fn all_permits(&self) -> Range {
        (self.under("s"), self.under("t"))
    }

    /// One locker's entries of `share`: `<segment><locker id>/`.
    pub fn own(&self, share: Share, locker: &str) -> Range {
        let start = self.under(&format!("{}{locker}/", Self::segment(share)));
        let end = prefix_end(&start);
        (start, end)
    }

    /// One call's main entry key (the only one, but for several permits).
    #[cfg(test)]
    pub fn entry(&self, share: Share, locker: &str, slot: u32) -> Vec<u8> {
        self.entries(share, locker, slot).swap_remove(0)
    }

    /// Every key of one call's entry, the main one first: one, or one per
    /// permit for a call that takes several.
    pub fn entries(&self, share: Share, locker: &str, slot: u32) -> Vec<Vec<u8>> {
        let own = self.own(share, locker).0;
        let name = |rest: String| {
            let mut k = own.clone();
            k.extend_from_slice(rest.as_bytes());
            k
        };
        match share {
            Share::Permit { n, .. } if n > 1 => {
                (0..n).map(|i| name(format!("{slot}-{i}-{n}"))).collect()
            }
            _ => vec![name(slot.to_string())],
        }
    }

    /// Whether `key` is the main key of its call's entry (see
    /// [`LineKeys::entries`]); `false` for keys fairlock did not name.
    pub fn is_main(&self, key: &[u8]) -> bool {
        self.parse(key).is_some_and(|(_, _, index)| index == 0)
    }

    /// What entry `key` asks for, if fairlock named it so.
    pub fn share_of(&self, key: &[u8]) -> Option<Share> {
        self.parse(key).map(|(share, _, _)| share)
    }

    /// What entry `key` asks for, the id of its locker, and which of its
    /// call's keys it is (0: the main one), if fairlock named it so.
    pub fn parse<'a>(&self, key: &'a [u8]) -> Option<(Share, &'a str, u32)> {
        let rest = std::str::from_utf8(key.strip_prefix(self.base.as_slice())?).ok()?;
        let mut parts = rest.split('/');
        let (kind, locker, slot) = (parts.next()?, parts.next()?, parts.next()?);
        let locker_ok = locker.len() == 32 && locker.bytes().all(|b| b.is_ascii_hexdigit());
        if parts.next().is_some() || !locker_ok {
            return None;
        }
        let number = |s: &str| -> Option<u32> {
            let ok = (1..=10).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit());
            ok.then(|| s.parse().ok()).flatten()
        };
        let mut slot_parts = slot.split('-');
        number(slot_parts.next()?)?;
        let (index, n) = match (slot_parts.next(), slot_parts.next(), slot_parts.next()) {
            (None, _, _) => (0, 1),
            (Some(i), Some(n), None) => (number(i)?, number(n)?),
            _ => return None,
        };
        if n < 2 && index > 0 || index >= n {
            return None;
        }
        let share = match kind {
            "r" | "w" if n > 1 => return None,
            "r" => Share::Read,
            "w" => Share::Write,
            _ => {
                let digits = kind.strip_prefix('s')?;
                let limit: u32 = digits.parse().ok().filter(|&l| l > 0)?;
                if digits != limit.to_string() || n > limit {
                    return None;
                }
                Share::Permit { limit, n }
            }
        };
        Some((share, locker, index))
    }

    /// The range of every key of the call whose main entry is `entry`,
    /// when it has more than one (see [`LineKeys::entries`]).
    pub fn keys_of_call(&self, entry: &[u8]) -> Option<Range> {
        let (share, _, _) = self.parse(entry)?;
        let Share::Permit { n, .. } = share else {
            return None;
        };
        if n < 2 {
            return None;
        }
        // `.../<slot>-0-<n>`: the call's keys share `.../<slot>-`.
        let text = std::str::from_utf8(entry).ok()?;
        let cut = text.rfind("-0-")? + 1;
        let start = entry[..cut].to_vec();
        let end = prefix_end(&start);
        Some((start, end))
    }
}

/// The owner value a caller writes to its entry (see [`crate::api::owner`]):
/// its kind's tag and a fresh UUID, then, for a permit, `limit=<n>`.
pub(crate) fn owner_value(share: Share) -> Vec<u8> {
    let (tag, extra) = match share {
        Share::Read => ('r', String::new()),
        Share::Write => ('w', String::new()),
        Share::Permit { limit, n: 1 } => ('s', format!("limit={limit}")),
        Share::Permit { limit, n } => ('s', format!("limit={limit} permits={n}")),
    };
    let attempt = format!("{tag}{}", uuid::Uuid::new_v4().simple());
    crate::api::owner::owner_value(&attempt, &extra).into_bytes()
}

/// An entry of the line, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub key: Vec<u8>,
    pub share: Share,
    pub create_revision: i64,
    /// 1 until someone touches it: a waiter not yet told it holds (or a
    /// holder admitted when it joined, which a departure never touches).
    pub version: i64,
    /// The main key of its call ([`LineKeys::entries`]): the one that
    /// stands for the call (all its permits) in an admission.
    pub main: bool,
}

/// Whom a departure from the line admits: the entries that hold after it
/// and did not before, read from the line's head in batches (see
/// `line_txn.rs`: the first batch in the departure's own txn, at revision
/// `at`; the next ones later, of the entries created up to `at` only: one
/// that joined after the departure was told then whether it holds).
pub(crate) struct Departure {
    share: Share,
    /// The leaving entry's create revision: where it stood in line.
    left: i64,
    /// The revision of the departure.
    pub at: i64,
    before: Admission,
    now: Admission,
    passed: bool,
}

impl Departure {
    /// The departure at revision `at` of an entry asking `share`, created
    /// at `left`.
    pub fn new(share: Share, left: i64, at: i64) -> Self {
        Departure {
            share,
            left,
            at,
            before: Admission::default(),
            now: Admission::default(),
            passed: false,
        }
    }

    /// The entries of the next batch (in line order, after the ones fed
    /// so far) that hold now and did not before the departure.
    pub fn admitted(&mut self, batch: &[Entry]) -> Vec<Entry> {
        let mut admitted = Vec::new();
        // A call's keys share one create revision, so they are next to
        // each other in line: its main key stands for all of them.
        for e in batch
            .iter()
            .filter(|e| e.create_revision <= self.at && e.main)
        {
            if !self.passed && e.create_revision > self.left {
                self.passed = true;
                self.before.next(self.share);
            }
            let held = self.before.next(e.share);
            if self.now.next(e.share) && !held {
                admitted.push(e.clone());
            }
        }
        admitted
    }

    /// Whether entries after those fed so far may hold too: every one fed
    /// holds now.
    pub fn more_may_hold(&self) -> bool {
        !self.now.closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::admission::Share::{Read, Write};

    #[allow(non_snake_case)]
    fn Permit(limit: u32) -> Share {
        Share::Permit { limit, n: 1 }
    }

    fn line(kinds: &[Share]) -> Vec<Entry> {
        kinds
            .iter()
            .enumerate()
            .map(|(i, &share)| Entry {
                key: format!("e{i}").into_bytes(),
                share,
                create_revision: 10 * (i as i64 + 1),
                version: 1,
                main: true,
            })
            .collect()
    }

    fn admitted(share: Share, left: i64, kinds: &[Share]) -> Vec<usize> {
        let after = line(kinds);
        let got = Departure::new(share, left, 1000).admitted(&after);
        got.iter()
            .map(|e| after.iter().position(|a| a == e).expect("from the line"))
            .collect()
    }

    #[test]
    fn a_departure_admits_who_it_blocked() {
        // A writer leaves the head: the readers up to the next writer hold.
        assert_eq!(admitted(Write, 5, &[Read, Read, Write, Read]), [0, 1]);
        assert_eq!(admitted(Write, 5, &[Write, Read]), [0]);
        // A reader leaves: a writer holds once no reader is left ahead.
        assert_eq!(admitted(Read, 5, &[Read, Write]), Vec::<usize>::new());
        assert_eq!(admitted(Read, 5, &[Write, Read]), [0]);
        // A permit leaves: the first waiting permit holds.
        assert_eq!(
            admitted(Permit(2), 5, &[Permit(2), Permit(2), Permit(2)]),
            [1]
        );
        assert_eq!(
            admitted(Permit(2), 15, &[Permit(2), Permit(2), Permit(2)]),
            [1]
        );
        // A waiting writer gives up: the readers behind it join the readers
        // that hold.
        assert_eq!(admitted(Write, 15, &[Read, Read, Write]), [1]);
        // A waiting reader gives up: nobody is admitted.
        assert_eq!(
            admitted(Read, 25, &[Write, Read, Read]),
            Vec::<usize>::new()
        );
    }

    #[test]
    fn a_call_of_several_permits_is_admitted_whole() {
        let (one, two) = (Permit(3), Share::Permit { limit: 3, n: 2 });
        // Held: a call of 2 (leaving) and one of 1; waiting: a call of 2
        // (two keys, one main) and one of 1.
        let mut after = line(&[one, two, two, one]);
        after[2].create_revision = after[1].create_revision;
        after[2].main = false;
        let got = Departure::new(two, 5, 1000).admitted(&after);
        assert_eq!(got, after[1..2], "1 + 2 fit in 3; the 1 behind waits");
        // The same line read in two batches split inside the call.
        let mut departure = Departure::new(two, 5, 1000);
        assert_eq!(departure.admitted(&after[..2]), after[1..2]);
        assert!(departure.admitted(&after[2..]).is_empty());
        // Its other keys are not calls of their own: with 4 permits, a
        // call of 2 held beside the leaving one, the single permit behind
        // it now fits (2 + 1), though the line holds 3 keys ahead of it.
        let (one4, two4) = (Permit(4), Share::Permit { limit: 4, n: 2 });
        let mut after = line(&[two4, two4, one4]);
        after[1].create_revision = after[0].create_revision;
        after[1].main = false;
        let got = Departure::new(two4, 5, 1000).admitted(&after);
        assert_eq!(got, after[2..], "2 + 1 of 4 hold");
        // A call of 2 behind two single permits of 3 still waits when a
        // third single one leaves: 1 + 1 + 2 > 3.
        let got = Departure::new(one, 5, 1000).admitted(&line(&[one, one, two]));
        assert!(got.is_empty());
    }

    #[test]
    fn batches_go_on_where_the_last_one_stopped() {
        let all = line(&[Read, Read, Read, Write, Read]);
        let mut departure = Departure::new(Write, 5, 1000);
        assert_eq!(departure.admitted(&all[..2]), all[..2]);
        assert!(departure.more_may_hold(), "every reader read holds");
        assert_eq!(departure.admitted(&all[2..]), all[2..3]);
        assert!(!departure.more_may_hold(), "a writer waits");
        // Entries that joined after the departure are not its to admit.
        let mut departure = Departure::new(Write, 5, 15);
        assert_eq!(departure.admitted(&all), all[..1]);
    }

    #[test]
    fn entry_names_round_trip_and_others_do_not_parse() {
        let keys = LineKeys::new("/p/", &Key::from("k"));
        let id = "0123456789abcdef0123456789abcdef";
        let two_of_12 = Share::Permit { limit: 12, n: 2 };
        for share in [Read, Write, Permit(1), Permit(12), two_of_12] {
            let entry = keys.entry(share, id, 7);
            assert_eq!(keys.share_of(&entry), Some(share));
            assert!(keys.is_main(&entry));
            let (start, end) = keys.kind(share);
            assert!(entry >= start && entry < end);
        }
        // Several permits: a key each, the main one first, all in the
        // call's range, and nothing of the slot 70's.
        let all = keys.entries(two_of_12, id, 7);
        assert_eq!(all.len(), 2);
        assert!(!keys.is_main(&all[1]));
        assert_eq!(keys.share_of(&all[1]), Some(two_of_12));
        let (start, end) = keys.keys_of_call(&all[0]).expect("two keys");
        assert!(all.iter().all(|k| *k >= start && *k < end));
        let other = keys.entry(two_of_12, id, 70);
        assert!(!(other >= start && other < end));
        assert_eq!(keys.keys_of_call(&keys.entry(Permit(12), id, 7)), None);
        let (rw_start, rw_end) = keys.readers_and_writers();
        for share in [Read, Write] {
            let entry = keys.entry(share, id, 7);
            assert!(entry >= rw_start && entry < rw_end);
        }
        let mutex_entry = format!("/p/k/_OWNERS_/{id}/f1");
        assert_eq!(keys.share_of(mutex_entry.as_bytes()), None);
        for stray in [
            "s0/x",
            "s01/",
            "s3/0123456789abcdef0123456789abcdef/7-0-4",
            "s3/0123456789abcdef0123456789abcdef/7-2-2",
            "s3/0123456789abcdef0123456789abcdef/7-1-1",
            "s3/0123456789abcdef0123456789abcdef/7-1",
            "r/0123456789abcdef0123456789abcdef/7-0-2",
            "r/short/1",
            "q/0123456789abcdef0123456789abcdef/1",
        ] {
            let k = format!("/p/k/_OWNERS_/{stray}");
            assert_eq!(keys.share_of(k.as_bytes()), None, "{stray}");
        }
        let (s12, _) = keys.kind(Permit(12));
        let (s1, s1_end) = keys.kind(Permit(1));
        assert!(
            !(s12 >= s1 && s12 < s1_end),
            "limit 12 is not inside limit 1's range"
        );
    }
}
