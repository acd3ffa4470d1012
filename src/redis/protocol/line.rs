//! The line of a read/write lock or semaphore on Redis: its keys, the
//! format of its entries, and the Lua scripts that change it (their text:
//! `line_lua.rs`). Who of the
//! line holds is the rule of `crate::semantics::admission`, computed in Lua by walking
//! the line from its head, so every decision is one atomic script.
//!
//! # Keys
//! For the lock key `L` (`<prefix><key>`, or `<prefix>{<key>}` on a
//! cluster, so that all of them hash to one slot):
//! - line `L/_OWNERS_/line`: a sorted set of entry ids, scored by arrival
//!   (the last score + 1), holders and waiters together;
//! - entry records `L/_OWNERS_/e/<id>`, each
//!   `"<r|w|s> <limit> <n> <hub> <token> <record ttl ms> <owner>"` with
//!   `PX`: what the entry asks for (`limit` 0 for reads and writes, `n`
//!   the permits it takes, 1 so far), the wake-up channel it listens on,
//!   its fencing token (0 while it waits);
//! - the fencing counter of the mutex (`keys.rs`): every grant of either
//!   kind increments it, so tokens of a key never go back;
//! - the epoch (`epoch.rs`): `walk` grants nothing before it, and `ENTER`
//!   creates it where it is missing.
//!
//! A waiter's record lives a record TTL (three polls) and is refreshed at
//! every poll; a holder's lives a lock TTL and is extended by its
//! watchdog. An entry whose record is gone (expired: its caller died or
//! paused; deleted by someone) is dead: the next walk drops it from the
//! line. The line itself is given a PTTL at least as long as every record
//! written into it, so it never outlives its last live entry by more than
//! a TTL, and an emptied line is deleted by Redis with its last member.
//!
//! # Scripts (`KEYS = [lock, queue, fence, line, epoch]`)
//! `walk` (the prelude) is `crate::semantics::admission::Admission` in Lua:
//! ```text
//! walk(me): head = none, held = 0
//!   for id in line, in order:
//!     e = record(id); if none: ZREM id (dead); continue
//!     holds = head is none, or e's kind is head's, not a write, and
//!             (a read, or held + e.n <= limit)
//!     if not holds: stop (nobody after it holds either)
//!     held += e.n; if e has no token: token = INCR fence, write it,
//!       with the full TTL for `me`, else with e's record TTL, and
//!       PUBLISH e's id on e's hub (a grant no one was told of)
//!   returns head, held, whether it stopped, and the least PTTL of the holders
//! ```
//! - `ENTER(id, share, owner, hub, ttl, record ttl, mode)`, the only way in
//!   (`mode` `try`, `join` or `check`):
//!   ```text
//!   if id in line:                       -- a waiter checking its place
//!     if its record is gone: walk(); return GONE
//!     if it has a token: renew it to the full TTL; return HELD token
//!     refresh its record (record TTL); walk(id)
//!     return HELD token if it got one, else WAIT least PTTL
//!   if mode = check: walk(); return GONE  -- it was dropped: never rejoin
//!   if the mutex's lock or queue key exists: return MUTEX
//!   s = walk()
//!   if s.head conflicts with share: return KIND (head's kind and limit)
//!   if share would hold after s (the walk did not stop, and it fits):
//!     ZADD, record with token = INCR fence and the full TTL; return HELD
//!   if mode = try: return WAIT              -- nothing written
//!   ZADD, record with token 0 and the record TTL; return WAIT least PTTL
//!   ```
//! - `LEAVE(id)`: `ZREM id`, `DEL` its record, `walk()` (granting whom
//!   that admits); returns HELD if it held, WAITED, or GONE.
//! - `EXTEND(id, ttl)`: renews the record of a holder still in line;
//!   returns 1, else 0 (the guard is lost).
//!
//! # Why it is fair and herd-free
//! Arrival order is the line's order, and a newcomer holds only if the
//! whole line holds and it fits after it (no barging past a waiter);
//! whom a departure admits is decided in the departure's own script, so
//! consecutive readers at the head are granted together by one release,
//! and only those granted are woken (one `PUBLISH` each, to the one
//! connection each waits on). A dead holder frees its share when its
//! record expires: the waiters behind it time their next check by the
//! least PTTL of the holders, and that check's walk drops it. Both fair
//! and unfair lockers keep arrival order here, as the `Locker` trait
//! promises for read/write locks and semaphores.
//!
//! The scripts use only the commands of the minimal ACL
//! (docs/production.md; no `EXISTS`, `ZCARD` or `TYPE`: a key's presence
//! is `PTTL` other than -2).
//!
//! # The mutex of the same name
//! A mutex ([`crate::Locker::lock`]) and a line never share a key: `ENTER`
//! answers MUTEX while the mutex's lock or queue key exists, and the
//! mutex's acquire script fails with `FAIRLOCK_SHARED` while the line
//! exists (see `lock_lua.rs`); both are [`crate::Error::InvalidKey`].

use crate::redis::protocol::keys::LockKeys;
use crate::semantics::admission::Share;
use crate::{Error, Key, RESERVED_SEGMENT};

/// The Redis keys of one line (beside the mutex's, `keys.rs`).
#[derive(Clone, Debug)]
pub(crate) struct LineKeys {
    pub lock: LockKeys,
    /// The sorted set of entry ids.
    pub line: String,
    /// Prefix of the entry records.
    pub entries: String,
}

impl LineKeys {
    pub fn new(lock: LockKeys) -> Self {
        LineKeys {
            line: line_key(&lock.lock),
            entries: format!("{}/{RESERVED_SEGMENT}/e/", lock.lock),
            lock,
        }
    }

    /// `KEYS` of the line's scripts: `[lock, queue, fence, line, epoch]`.
    pub fn script_keys(&self) -> [&str; 5] {
        [
            self.lock.lock.as_str(),
            self.lock.queue.as_str(),
            self.lock.fence.as_str(),
            self.line.as_str(),
            self.lock.epoch.as_str(),
        ]
    }
}

/// The line of the lock key `lock` (the mutex's acquire script builds the
/// same name in Lua).
pub(crate) fn line_key(lock: &str) -> String {
    format!("{lock}/{RESERVED_SEGMENT}/line")
}

/// What an entry asks for, as its record and `ENTER` spell it: kind,
/// limit (0 for reads and writes) and permits.
pub(crate) fn spell(share: Share) -> (&'static str, u32, u32) {
    match share {
        Share::Read => ("r", 0, 1),
        Share::Write => ("w", 0, 1),
        Share::Permit { limit, n } => ("s", limit, n),
    }
}

/// An entry record read back (`"<r|w|s> <limit> <n> <hub> <token> <record
/// ttl ms> <owner>"`): what it asks for, its token (0 while it waits) and
/// its owner value; `None` if fairlock did not write it.
pub(crate) fn parse_entry(record: &str) -> Option<(Share, u64, &str)> {
    let mut f = record.splitn(7, ' ');
    let (kind, limit, n) = (f.next()?, f.next()?.parse().ok()?, f.next()?.parse().ok()?);
    let (_hub, token, _ttl, owner) = (f.next()?, f.next()?.parse().ok()?, f.next()?, f.next()?);
    let share = match kind {
        "r" => Share::Read,
        "w" => Share::Write,
        "s" => Share::Permit { limit, n },
        _ => return None,
    };
    Some((share, token, owner))
}

/// How a caller enters the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Holds at once or writes nothing.
    Try,
    /// Joins the line (or, if an earlier unanswered round put it there,
    /// checks its place).
    Join,
    /// Checks its place; never joins again.
    Check,
}

impl Mode {
    pub fn word(self) -> &'static str {
        match self {
            Mode::Try => "try",
            Mode::Join => "join",
            Mode::Check => "check",
        }
    }
}

/// What `ENTER` answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entered {
    /// It holds, with this token.
    Held(u64),
    /// It waits (or, for a try, would wait); the least PTTL of the
    /// holders ahead, when known.
    Waits(Option<u64>),
    /// Its entry is gone.
    Gone,
    /// The key is in use as a mutex.
    Mutex,
    /// The key's line holds entries of this other kind.
    Kind(Share),
}

impl Entered {
    /// Reads `ENTER`'s reply: `{1, token}`, `{0, pttl}`, `{-1}` (gone),
    /// `{-2}` (mutex), `{-3, kind, limit}` (kind 1 read, 2 write, 3
    /// permits).
    pub fn from_reply(reply: &[i64]) -> Option<Entered> {
        let at = |i: usize| reply.get(i).copied();
        Some(match at(0)? {
            1 => Entered::Held(u64::try_from(at(1)?).ok()?),
            0 => Entered::Waits(at(1).and_then(|p| u64::try_from(p).ok())),
            -1 => Entered::Gone,
            -2 => Entered::Mutex,
            -3 => Entered::Kind(match (at(1)?, at(2)?) {
                (1, _) => Share::Read,
                (2, _) => Share::Write,
                // The other call's own permits do not matter to a refusal.
                (3, limit) => Share::Permit {
                    limit: u32::try_from(limit).ok()?,
                    n: 1,
                },
                _ => return None,
            }),
            _ => return None,
        })
    }
}

/// What `LEAVE` found of the entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Left {
    /// It held (2).
    Held,
    /// It waited (1).
    Waited,
    /// It was gone (0).
    Gone,
}

impl Left {
    pub fn from_answer(answer: i64) -> Left {
        match answer {
            2 => Left::Held,
            1 => Left::Waited,
            _ => Left::Gone,
        }
    }
}

/// The error for a line's caller on a key in use as a mutex.
pub(crate) fn in_use_as_mutex(key: &Key, share: Share) -> Error {
    crate::semantics::mixed_use::in_use_as_mutex(key.as_str(), share)
}

/// The error for a mutex on a key in use as a read/write lock or semaphore.
pub(crate) fn in_use_as_line(key: &Key) -> Error {
    crate::semantics::mixed_use::in_use_as_line(key.as_str())
}

#[cfg(test)]
mod tests {
    #[test]
    fn entry_records_are_read_back() {
        use super::{Share, parse_entry};
        let (share, token, owner) =
            parse_entry("s 3 2 hub 17 3000 e1 pid=7 host=h at=5 locker=L").expect("parses");
        assert_eq!((share, token), (Share::Permit { limit: 3, n: 2 }, 17));
        assert_eq!(owner, "e1 pid=7 host=h at=5 locker=L");
        assert_eq!(parse_entry("r 0 1 hub 0 3000 o").map(|e| e.1), Some(0));
        assert!(parse_entry("x 0 1 hub 0 3000 o").is_none());
        assert!(parse_entry("r 0 1 hub").is_none());
    }

    use super::*;
    use crate::redis::protocol::keys::Layout;

    #[test]
    fn line_keys_share_the_lock_keys_name() {
        for (layout, lock) in [(Layout::Flat, "p:a/b"), (Layout::Tagged, "p:{a/b}")] {
            let keys = LineKeys::new(LockKeys::new(layout, "p:", &Key::from("a/b")));
            assert_eq!(keys.line, format!("{lock}/_OWNERS_/line"));
            assert_eq!(keys.entries, format!("{lock}/_OWNERS_/e/"));
            assert_eq!(keys.script_keys()[3], keys.line);
            assert_eq!(line_key(lock), keys.line);
            // No lock key can name them (a `_OWNERS_` segment is refused).
            let name = keys.line.strip_prefix("p:").unwrap();
            assert!(Key::from(name).validate().is_err(), "{name}");
        }
    }

    #[test]
    fn replies_read_back() {
        assert_eq!(Entered::from_reply(&[1, 7]), Some(Entered::Held(7)));
        assert_eq!(
            Entered::from_reply(&[0, 250]),
            Some(Entered::Waits(Some(250)))
        );
        assert_eq!(Entered::from_reply(&[0, -1]), Some(Entered::Waits(None)));
        assert_eq!(Entered::from_reply(&[-1]), Some(Entered::Gone));
        assert_eq!(Entered::from_reply(&[-2]), Some(Entered::Mutex));
        assert_eq!(
            Entered::from_reply(&[-3, 3, 4]),
            Some(Entered::Kind(Share::Permit { limit: 4, n: 1 }))
        );
        assert_eq!(
            Entered::from_reply(&[-3, 2, 0]),
            Some(Entered::Kind(Share::Write))
        );
        assert_eq!(Entered::from_reply(&[-3, 9, 0]), None);
        assert_eq!(Entered::from_reply(&[]), None);
        assert_eq!(Left::from_answer(2), Left::Held);
        assert_eq!(Left::from_answer(1), Left::Waited);
        assert_eq!(Left::from_answer(0), Left::Gone);
        assert_eq!(spell(Share::Permit { limit: 3, n: 1 }), ("s", 3, 1));
        assert_eq!(spell(Share::Permit { limit: 3, n: 2 }), ("s", 3, 2));
        assert_eq!(spell(Share::Read), ("r", 0, 1));
    }
}
