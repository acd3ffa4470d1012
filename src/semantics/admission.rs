//! Read/write locks and semaphores, as every backend grants them: who of a
//! key's line holds.
//!
//! Every `read_lock`, `write_lock` and `acquire_permits` call joins the key's line
//! in arrival order and holds once it is among the line's first entries
//! that may hold together:
//! - a **writer** holds alone: once nobody is ahead of it;
//! - a **reader** holds with the readers around it: once no writer is ahead;
//! - a request for `n` **permits** of a semaphore with limit `L` holds once
//!   the permits of the requests ahead and its own fit: at most `L`
//!   (so a large request at the head holds back the small ones behind
//!   it: arrival order, never barging).
//!
//! So a writer waits for the readers ahead of it, and readers that arrive
//! after a waiting writer wait behind it (no writer starves); a key used
//! as a semaphore admits its first `n` callers. Backends refuse to mix
//! families on one key (reads and writes with permits) or permits of
//! different limits: [`conflict`] says why.

use crate::{Error, Key};

/// What one call asks to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Share {
    /// Shared with other readers.
    Read,
    /// Exclusive.
    Write,
    /// `n` of `limit` permits.
    Permit {
        /// The semaphore's limit: the same for every user of a key.
        limit: u32,
        /// How many permits this call holds: 1 to `limit`.
        n: u32,
    },
}

impl Share {
    /// `n` permits of a semaphore with `limit` permits: refused for a
    /// limit or `n` of 0 and for `n` over the limit.
    pub fn permits(n: u32, limit: u32) -> crate::Result<Share> {
        if limit == 0 {
            return Err(Error::InvalidConfig(
                "a semaphore's limit must be at least 1 (the number of permits it has)".into(),
            ));
        }
        if n == 0 || n > limit {
            return Err(Error::InvalidConfig(format!(
                "cannot take {n} of a semaphore's {limit} permits: ask for 1 to {limit}"
            )));
        }
        Ok(Share::Permit { limit, n })
    }

    /// How much may hold together with a first holder of this kind.
    fn limit(self) -> usize {
        match self {
            Share::Read => usize::MAX,
            Share::Write => 1,
            Share::Permit { limit, .. } => usize::try_from(limit).unwrap_or(usize::MAX),
        }
    }

    /// How much of [`Share::limit`] this call takes.
    fn weight(self) -> usize {
        match self {
            Share::Read | Share::Write => 1,
            Share::Permit { n, .. } => usize::try_from(n).unwrap_or(usize::MAX),
        }
    }

    /// Whether `self` and `other` are the same kind of lock: both reads,
    /// both writes, or permits of one limit (however many each takes).
    pub fn same_kind(self, other: Share) -> bool {
        match (self, other) {
            (Share::Permit { limit: a, .. }, Share::Permit { limit: b, .. }) => a == b,
            (a, b) => a == b,
        }
    }

    /// What the call is called, for errors.
    pub fn describe(self) -> String {
        match self {
            Share::Read => "a read lock".into(),
            Share::Write => "a write lock".into(),
            Share::Permit { limit, .. } => format!("a semaphore with limit {limit}"),
        }
    }
}

/// Who of a line holds, counted entry by entry from its head: what
/// [`holders`] counts, for a line read in batches.
#[derive(Default)]
pub(crate) struct Admission {
    head: Option<Share>,
    holding: usize,
    /// An entry that does not hold was seen: none after it holds either.
    closed: bool,
}

impl Admission {
    /// Whether the next entry in line, asking `share`, holds.
    pub fn next(&mut self, share: Share) -> bool {
        let holds = !self.closed
            && match self.head {
                None => true,
                Some(head) => {
                    share.same_kind(head)
                        && head != Share::Write
                        && self.holding.saturating_add(share.weight()) <= head.limit()
                }
            };
        if holds {
            self.head.get_or_insert(share);
            self.holding = self.holding.saturating_add(share.weight());
        } else {
            self.closed = true;
        }
        holds
    }

    /// `true` once an entry that does not hold was seen.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub fn closed(&self) -> bool {
        self.closed
    }
}

/// How many of the first entries of a line (kinds in arrival order) hold.
pub(crate) fn holders(line: impl IntoIterator<Item = Share>) -> usize {
    let mut admission = Admission::default();
    line.into_iter().take_while(|&k| admission.next(k)).count()
}

/// Whether `a` and `b` may be in one key's line: both reads or writes, or
/// permits of one limit.
pub(crate) fn may_share_a_key(a: Share, b: Share) -> bool {
    match (a, b) {
        (Share::Permit { limit: x, .. }, Share::Permit { limit: y, .. }) => x == y,
        (Share::Permit { .. }, _) | (_, Share::Permit { .. }) => false,
        _ => true,
    }
}

/// Why `want` may not join a line holding `present` on `key`: a read/write
/// lock and a semaphore on one key, or semaphores of different limits.
pub(crate) fn conflict(key: &Key, want: Share, present: Share) -> Option<Error> {
    (!may_share_a_key(want, present)).then(|| Error::InvalidKey {
        key: key.to_string(),
        reason: format!(
            "it is in use as {}, so it cannot be used as {}; give each lock a key of its own",
            present.describe(),
            want.describe()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::Share::{Read, Write};
    use super::*;

    #[allow(non_snake_case)]
    fn Permit(limit: u32) -> Share {
        Share::Permit { limit, n: 1 }
    }

    fn permits(n: u32, limit: u32) -> Share {
        Share::Permit { limit, n }
    }

    #[test]
    fn who_holds() {
        assert_eq!(holders([]), 0);
        assert_eq!(holders([Write, Write]), 1);
        assert_eq!(holders([Write, Read, Read]), 1);
        assert_eq!(holders([Read, Read, Read, Write, Read]), 3);
        assert_eq!(holders([Read, Write, Read]), 1);
        assert_eq!(holders([Permit(2), Permit(2), Permit(2)]), 2);
        assert_eq!(holders([Permit(3), Permit(3)]), 2);
        assert_eq!(holders([Permit(1), Permit(1)]), 1);
        assert_eq!(
            holders([Permit(3), Permit(2), Permit(3)]),
            1,
            "another limit waits"
        );
        assert_eq!(
            holders([permits(2, 3), permits(2, 3), Permit(3)]),
            1,
            "2 + 2 > 3"
        );
        assert_eq!(
            holders([permits(2, 3), Permit(3), Permit(3)]),
            2,
            "in order"
        );
        assert_eq!(holders([permits(3, 3), Permit(3)]), 1);
        assert_eq!(holders([Permit(3), permits(2, 3), Permit(3)]), 2);
    }

    #[test]
    fn families_do_not_mix() {
        let key = Key::from("k");
        assert!(conflict(&key, Read, Write).is_none());
        assert!(conflict(&key, Write, Read).is_none());
        assert!(conflict(&key, Permit(3), Permit(3)).is_none());
        let err = conflict(&key, Permit(2), Permit(3)).expect("limits differ");
        assert!(err.to_string().contains("limit 3"), "{err}");
        assert!(conflict(&key, Read, Permit(3)).is_some());
        assert!(conflict(&key, Permit(3), Write).is_some());
        assert!(conflict(&key, permits(2, 3), Permit(3)).is_none());
        assert!(Share::permits(1, 0).is_err());
        assert!(matches!(Share::permits(0, 3), Err(Error::InvalidConfig(_))));
        assert!(matches!(Share::permits(4, 3), Err(Error::InvalidConfig(_))));
        assert_eq!(Share::permits(2, 3).ok(), Some(permits(2, 3)));
    }
}
