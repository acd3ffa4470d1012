//! Where a lock lives in etcd.
//!
//! For prefix `/fairlock/` and key `jobs/export`:
//! - lock key: `/fairlock/jobs/export`, value: the holder's owner string,
//!   lease: the holder's session lease;
//! - waiter queue: `/fairlock/jobs/export/_OWNERS_/<locker id>/<mode><slot>`,
//!   ordered by create revision; `<mode>` is `f` (fair: gets the lock handed
//!   over) or `u` (unfair: gets woken to try). The `<locker id>` level lets
//!   one long-lived watch per locker and key carry every touch for it.
//!   `<slot>` is a small number the locker reuses (see `slots.rs`): etcd
//!   keeps an index entry for every key name ever written until it
//!   compacts, and range reads and prefix compares over the queue walk them
//!   all, so a name per attempt would slow every later request on the
//!   queue (and the whole etcd) as history grows.
//!
//! Anything else under the queue prefix (a key without a lease, a name that
//! is not `<locker id>/<f|u><slot>`) was not written by fairlock: it is
//! never handed the lock and never blocks the queue ([`is_waiter`]).

use crate::{Key, RESERVED_SEGMENT};

/// The etcd keys of one lock.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// The lock key.
    pub lock: Vec<u8>,
    /// Prefix of the whole fair queue.
    pub queue: Vec<u8>,
}

impl Layout {
    pub fn new(prefix: &str, key: &Key) -> Self {
        let lock = format!("{prefix}{key}");
        let queue = format!("{lock}/{RESERVED_SEGMENT}/");
        Layout {
            lock: lock.into_bytes(),
            queue: queue.into_bytes(),
        }
    }

    /// The queue prefix holding one locker's waiters.
    pub fn locker_queue(&self, locker_id: &str) -> Vec<u8> {
        let mut k = self.queue.clone();
        k.extend_from_slice(locker_id.as_bytes());
        k.push(b'/');
        k
    }

    /// One waiter's queue key: `fair` or not, in `slot`.
    pub fn waiter(&self, locker_id: &str, fair: bool, slot: u32) -> Vec<u8> {
        let mut k = self.locker_queue(locker_id);
        k.extend_from_slice(format!("{}{slot}", if fair { 'f' } else { 'u' }).as_bytes());
        k
    }
}

/// A queue entry's name, `<locker id>/<f|u><slot>` after the queue prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryName<'a> {
    /// The waiting locker's id.
    pub locker: &'a str,
    /// `f` (fair) or `u` (unfair).
    pub fair: bool,
}

/// Parses the name of queue key `key` under `queue` (the queue prefix);
/// `None` if fairlock did not name it so.
pub(crate) fn entry_name<'a>(queue: &[u8], key: &'a [u8]) -> Option<EntryName<'a>> {
    let rest = std::str::from_utf8(key.strip_prefix(queue)?).ok()?;
    let (locker, slot) = rest.split_once('/')?;
    let (mode, number) = slot.split_at_checked(1)?;
    let fair = match mode {
        "f" => true,
        "u" => false,
        _ => return None,
    };
    // A locker id is a simple UUID: 32 lowercase hex digits.
    let id = locker.len() == 32
        && locker
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let slot = (1..=10).contains(&number.len()) && number.bytes().all(|b| b.is_ascii_digit());
    (id && slot).then_some(EntryName { locker, fair })
}

/// `true` if queue key `key` (bound to `lease`) is a fairlock waiter: named
/// as fairlock names them and bound to a lease, so it vanishes when its
/// owner does. Anything else under the queue is someone else's data.
pub(crate) fn is_waiter(queue: &[u8], key: &[u8], lease: i64) -> bool {
    lease != 0 && entry_name(queue, key).is_some()
}

/// The value written to the lock key and queue keys (see
/// [`crate::owner`]): `<attempt> pid=<pid> host=<host> at=<unix ms>`.
pub(crate) fn owner_value(attempt: &str) -> Vec<u8> {
    crate::owner::owner_value(attempt, "").into_bytes()
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
        let a = Layout::new("/p/", &Key::from("a"));
        let ab = Layout::new("/p/", &Key::from("ab"));
        assert!(!ab.queue.starts_with(&a.queue));
        assert!(!ab.lock.starts_with(&a.queue));
        assert_eq!(a.waiter("L", true, 7), b"/p/a/_OWNERS_/L/f7".to_vec());
        assert_eq!(prefix_end(b"/p/a/"), b"/p/a0".to_vec());
    }

    #[test]
    fn entry_names_round_trip_and_strays_do_not_parse() {
        let a = Layout::new("/p/", &Key::from("a"));
        let id = "0123456789abcdef0123456789abcdef";
        for (fair, slot) in [(true, 0), (false, 12), (true, u32::MAX)] {
            let key = a.waiter(id, fair, slot);
            let name = entry_name(&a.queue, &key).expect("parses");
            assert_eq!(name, EntryName { locker: id, fair });
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
}
