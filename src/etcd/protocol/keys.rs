//! Where a lock lives in etcd and what its keys hold: every etcd wire
//! format of the backend, each with a round-trip test.
//!
//! For prefix `/fairlock/` and key `jobs/export`:
//! - lock key: `/fairlock/jobs/export`, value: the holder's owner string,
//!   lease: the holder's session lease;
//! - waiter queue: `/fairlock/jobs/export/_OWNERS_/<locker id>/<mode><slot>`,
//!   ordered by create revision; `<mode>` is `f` (fair: gets the lock handed
//!   over) or `u` (unfair: gets woken to try). The `<locker id>` level lets
//!   one long-lived watch per locker and key carry every touch for it.
//!   `<slot>` is a small number the locker reuses (see `session/slots.rs`): etcd
//!   keeps an index entry for every key name ever written until it
//!   compacts, and range reads and prefix compares over the queue walk them
//!   all, so a name per attempt would slow every later request on the
//!   queue (and the whole etcd) as history grows.
//!
//! Anything else under the queue prefix (a key without a lease, a name that
//! is not `<locker id>/<f|u><slot>`) was not written by fairlock: it is
//! never handed the lock and never blocks the queue ([`is_waiter`]).
//!
//! Values: the lock key and every queue key hold an owner value
//! ([`owner_value`]); a fair grant appends the waiters behind the grantee
//! to its queue key's value ([`pass_along`], read back by [`passed_along`]).

use crate::semantics::fairness::Fairness;
use crate::{Key, RESERVED_SEGMENT};

/// The etcd keys of one lock.
#[derive(Clone, Debug)]
pub(crate) struct LockKeys {
    /// The lock key.
    pub lock: Vec<u8>,
    /// Prefix of the whole fair queue.
    pub queue: Vec<u8>,
}

impl LockKeys {
    pub fn new(prefix: &str, key: &Key) -> Self {
        let lock = format!("{prefix}{key}");
        let queue = format!("{lock}/{RESERVED_SEGMENT}/");
        LockKeys {
            lock: lock.into_bytes(),
            queue: queue.into_bytes(),
        }
    }

    /// The range of the read/write lock and semaphore entries of the same
    /// name (`line.rs`: `r/`, `s<n>/` and `w/` under the queue prefix;
    /// the mutex's waiters, under hex locker ids, and an election's
    /// `leader` sort before it). The mutex is free only while it is empty.
    pub fn line(&self) -> (Vec<u8>, Vec<u8>) {
        let mut start = self.queue.clone();
        start.extend_from_slice(b"r/");
        let mut last = self.queue.clone();
        last.extend_from_slice(b"w/");
        (start, prefix_end(&last))
    }

    /// The queue prefix holding one locker's waiters.
    pub fn locker_queue(&self, locker_id: &str) -> Vec<u8> {
        let mut k = self.queue.clone();
        k.extend_from_slice(locker_id.as_bytes());
        k.push(b'/');
        k
    }

    /// One waiter's queue key: its mode's tag, then `slot`.
    pub fn waiter(&self, locker_id: &str, fairness: Fairness, slot: u32) -> Vec<u8> {
        let mut k = self.locker_queue(locker_id);
        k.extend_from_slice(format!("{}{slot}", tag(fairness)).as_bytes());
        k
    }
}

/// The mode tag of queue entry names and attempt ids: `f` (fair: gets the
/// lock handed over) or `u` (unfair: gets woken to try).
fn tag(fairness: Fairness) -> char {
    match fairness {
        Fairness::Fair => 'f',
        Fairness::Unfair => 'u',
    }
}

/// The mode of the waiter whose queue key is `queue_key`, read from the tag
/// that starts its last segment: unfair for `u`, fair otherwise.
pub(crate) fn waiter_mode(queue_key: &[u8]) -> Fairness {
    let last = queue_key.rsplit(|&b| b == b'/').next();
    match last.and_then(|s| s.first()) {
        Some(b'u') => Fairness::Unfair,
        _ => Fairness::Fair,
    }
}

/// A queue entry's name, `<locker id>/<f|u><slot>` after the queue prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryName<'a> {
    /// The waiting locker's id.
    pub locker: &'a str,
    /// The mode its tag names: `f` fair, `u` unfair.
    pub mode: Fairness,
}

/// Parses the name of queue key `key` under `queue` (the queue prefix);
/// `None` if fairlock did not name it so.
pub(crate) fn entry_name<'a>(queue: &[u8], key: &'a [u8]) -> Option<EntryName<'a>> {
    let rest = std::str::from_utf8(key.strip_prefix(queue)?).ok()?;
    let (locker, slot) = rest.split_once('/')?;
    let (mode, number) = slot.split_at_checked(1)?;
    let mode = match mode {
        "f" => Fairness::Fair,
        "u" => Fairness::Unfair,
        _ => return None,
    };
    // A locker id is a simple UUID: 32 lowercase hex digits.
    let id = locker.len() == 32
        && locker
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let slot = (1..=10).contains(&number.len()) && number.bytes().all(|b| b.is_ascii_digit());
    (id && slot).then_some(EntryName { locker, mode })
}

/// `true` if queue key `key` (bound to `lease`) is a fairlock waiter: named
/// as fairlock names them and bound to a lease, so it vanishes when its
/// owner does. Anything else under the queue is someone else's data.
///
/// The lease must come from a read of whole entries: etcd 3.7 answers
/// keys-only ranges from its index, with lease 0 for every key, which
/// would make every waiter look like someone else's data.
pub(crate) fn is_waiter(queue: &[u8], key: &[u8], lease: i64) -> bool {
    lease != 0 && entry_name(queue, key).is_some()
}

/// The value a new attempt writes to the lock key and its queue key (see
/// [`crate::api::owner`]): `<attempt> pid=<pid> host=<host> at=<unix ms>`, where
/// `<attempt>` is the mode's tag and a fresh UUID, so that no two attempts
/// write the same value.
pub(crate) fn owner_value(fairness: Fairness) -> Vec<u8> {
    let attempt = format!("{}{}", tag(fairness), uuid::Uuid::new_v4().simple());
    crate::api::owner::owner_value(&attempt, "").into_bytes()
}

/// A waiter behind the holder, as last read (or passed along).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Successor {
    pub key: Vec<u8>,
    pub create_revision: i64,
    pub lease: i64,
    pub value: Vec<u8>,
}

/// The value of grantee `s`'s queue key that passes the waiters behind it
/// (`rest`) along: `s`'s own value, then one line per waiter,
/// `<create revision> <lease> <key after the queue prefix> <value>`.
/// `None` if there is nothing to pass or an entry would not parse back.
pub(crate) fn pass_along(keys: &LockKeys, s: &Successor, rest: &[Successor]) -> Option<Vec<u8>> {
    if rest.is_empty() || s.value.contains(&b'\n') {
        return None;
    }
    let mut value = s.value.clone();
    for w in rest {
        let suffix = w.key.strip_prefix(keys.queue.as_slice())?;
        if suffix.is_empty()
            || suffix.iter().any(|b| matches!(b, b' ' | b'\n'))
            || w.value.contains(&b'\n')
        {
            return None;
        }
        value.extend_from_slice(format!("\n{} {} ", w.create_revision, w.lease).as_bytes());
        value.extend_from_slice(suffix);
        value.push(b' ');
        value.extend_from_slice(&w.value);
    }
    Some(value)
}

/// The waiters a grant passed along in the grantee's queue key value
/// `value` (see [`pass_along`]), whose first line must be the grantee's
/// own `owner` value. Empty if there are none or they do not parse (the
/// holder then looks).
pub(crate) fn passed_along(keys: &LockKeys, owner: &[u8], value: &[u8]) -> Vec<Successor> {
    let mut lines = value.split(|&b| b == b'\n');
    if lines.next() != Some(owner) {
        return Vec::new();
    }
    let mut list = Vec::new();
    for line in lines {
        let mut fields = line.splitn(4, |&b| b == b' ');
        let num = |f: Option<&[u8]>| std::str::from_utf8(f?).ok()?.parse::<i64>().ok();
        let (Some(create_revision), Some(lease), Some(suffix), Some(value)) = (
            num(fields.next()),
            num(fields.next()),
            fields.next(),
            fields.next(),
        ) else {
            return Vec::new();
        };
        let mut key = keys.queue.clone();
        key.extend_from_slice(suffix);
        list.push(Successor {
            key,
            create_revision,
            lease,
            value: value.to_vec(),
        });
    }
    list
}

/// The end of the range of keys starting with `prefix`.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_a_and_ab_do_not_overlap() {
        let a = LockKeys::new("/p/", &Key::from("a"));
        let ab = LockKeys::new("/p/", &Key::from("ab"));
        assert!(!ab.queue.starts_with(&a.queue));
        assert!(!ab.lock.starts_with(&a.queue));
        assert_eq!(
            a.waiter("L", Fairness::Fair, 7),
            b"/p/a/_OWNERS_/L/f7".to_vec()
        );
        assert_eq!(prefix_end(b"/p/a/"), b"/p/a0".to_vec());
    }

    #[test]
    fn entry_names_round_trip_and_strays_do_not_parse() {
        let a = LockKeys::new("/p/", &Key::from("a"));
        let id = "0123456789abcdef0123456789abcdef";
        for (fairness, slot) in [
            (Fairness::Fair, 0),
            (Fairness::Unfair, 12),
            (Fairness::Fair, u32::MAX),
        ] {
            let key = a.waiter(id, fairness, slot);
            let name = entry_name(&a.queue, &key).expect("parses");
            let expected = EntryName {
                locker: id,
                mode: fairness,
            };
            assert_eq!(name, expected);
            assert_eq!(waiter_mode(&key), fairness, "the tag reads back");
            assert!(is_waiter(&a.queue, &key, 7));
            assert!(!is_waiter(&a.queue, &key, 0), "no lease: not a waiter");
        }
        for stray in [
            "foreign",
            "0123abcd/f1",
            "0123456789ABCDEF0123456789ABCDEF/f1",
            "0123456789abcdef0123456789abcdef/x1",
            "L/x1",
            "L/f",
            "L/f1x",
            "/f1",
            "L/f1/more",
            "L-1/f1",
            "L/u99999999999",
        ] {
            let mut key = a.queue.clone();
            key.extend_from_slice(stray.as_bytes());
            assert_eq!(entry_name(&a.queue, &key), None, "{stray}");
        }
        assert_eq!(
            entry_name(
                &a.queue,
                &[a.queue.clone(), vec![0xff, b'/', b'f', b'1']].concat()
            ),
            None
        );
    }

    #[test]
    fn owner_values_carry_the_mode_tag_and_parse_back() {
        for fairness in [Fairness::Fair, Fairness::Unfair] {
            let value = owner_value(fairness);
            let text = String::from_utf8(value.clone()).expect("utf-8");
            let owner = crate::Owner::parse(&text);
            assert_eq!(owner.pid, Some(std::process::id()), "{text}");
            let attempt = text.split(' ').next().expect("attempt");
            assert_eq!(attempt.len(), 33, "{text}");
            assert!(attempt.starts_with(tag(fairness)), "{text}");
            assert_ne!(owner_value(fairness), value, "each attempt its own value");
        }
    }

    fn waiter(keys: &LockKeys, attempt: &str, rev: i64) -> Successor {
        Successor {
            key: keys.waiter(
                "0123456789abcdef0123456789abcdef",
                Fairness::Fair,
                u32::try_from(rev).unwrap_or_default(),
            ),
            create_revision: rev,
            lease: 0x7f00 + rev,
            value: format!("{attempt} pid=7 host=h-1 at=1700000000000").into_bytes(),
        }
    }

    #[test]
    fn a_grant_passes_the_waiters_behind_along() {
        let keys = LockKeys::new("/p/", &Key::from("a b/c"));
        let list: Vec<_> = (0..4)
            .map(|i| waiter(&keys, &format!("f{i}"), 10 + i))
            .collect();
        let value = pass_along(&keys, &list[0], &list[1..]).expect("passes");
        let value = value.as_slice();
        assert!(value.starts_with(&list[0].value));
        assert_eq!(passed_along(&keys, &list[0].value, value), list[1..]);
        // Not our value, or nothing behind: nothing passed.
        assert!(passed_along(&keys, b"other", value).is_empty());
        assert!(passed_along(&keys, &list[0].value, &list[0].value).is_empty());
        // A value that would not parse back is not passed.
        let mut odd = list[1].clone();
        odd.value.extend_from_slice(b"\nx");
        assert_eq!(pass_along(&keys, &list[0], &[odd]), None);
        assert_eq!(pass_along(&keys, &list[0], &[]), None);
    }
}
