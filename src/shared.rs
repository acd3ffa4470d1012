//! Read/write locks and semaphores, as every backend grants them: who of a
//! key's line holds.
//!
//! Every `read_lock`, `write_lock` and `acquire_permits` call joins the key's line
//! in arrival order and holds once it is among the line's first entries
//! that may hold together:
//! - a **writer** holds alone: once nobody is ahead of it;
//! - a **reader** holds with the readers around it: once no writer is ahead;
//! - a **permit** of a semaphore with limit `n` holds once fewer than `n`
//!   permits are ahead.
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
    /// One of `limit` permits.
    Permit(u32),
}

impl Share {
    /// A permit of a semaphore with `limit` permits; a limit of 0 is
    /// refused.
    pub fn permit(limit: u32) -> crate::Result<Share> {
        if limit == 0 {
            return Err(Error::InvalidConfig(
                "a semaphore's limit must be at least 1 (the number of holders it admits at once)"
                    .into(),
            ));
        }
        Ok(Share::Permit(limit))
    }

    /// `n` permits of a semaphore with `limit` permits: refused for a
    /// limit or `n` of 0 and for `n` over the limit; `n` over 1 is not
    /// supported yet (refused, never granted in part).
    pub fn permits(n: u32, limit: u32) -> crate::Result<Share> {
        let share = Share::permit(limit)?;
        if n == 0 || n > limit {
            return Err(Error::InvalidConfig(format!(
                "cannot take {n} of a semaphore's {limit} permits: ask for 1 to {limit}"
            )));
        }
        if n > 1 {
            return Err(Error::Unsupported(format!(
                "taking {n} permits in one call is not supported yet: ask for 1 permit per \
                 guard, or give each unit of work one permit"
            )));
        }
        Ok(share)
    }

    /// How many may hold together with a first holder of this kind.
    fn limit(self) -> usize {
        match self {
            Share::Read => usize::MAX,
            Share::Write => 1,
            Share::Permit(n) => usize::try_from(n).unwrap_or(usize::MAX),
        }
    }

    /// What the call is called, for errors.
    pub fn describe(self) -> String {
        match self {
            Share::Read => "a read lock".into(),
            Share::Write => "a write lock".into(),
            Share::Permit(n) => format!("a semaphore with limit {n}"),
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
                Some(head) => share == head && head != Share::Write && self.holding < head.limit(),
            };
        if holds {
            self.head.get_or_insert(share);
            self.holding += 1;
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
        (Share::Permit(x), Share::Permit(y)) => x == y,
        (Share::Permit(_), _) | (_, Share::Permit(_)) => false,
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
    use super::Share::{Permit, Read, Write};
    use super::*;

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
        assert!(Share::permit(0).is_err());
        assert!(matches!(Share::permits(0, 3), Err(Error::InvalidConfig(_))));
        assert!(matches!(Share::permits(4, 3), Err(Error::InvalidConfig(_))));
        assert!(matches!(Share::permits(2, 3), Err(Error::Unsupported(_))));
        assert_eq!(Share::permits(1, 3).ok(), Some(Permit(3)));
    }
}
