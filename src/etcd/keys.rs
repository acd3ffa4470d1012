//! Where a lock lives in etcd.
//!
//! For prefix `/fairlock/` and key `jobs/export`:
//! - lock key: `/fairlock/jobs/export`, value: the holder's owner string,
//!   lease: the holder's session lease;
//! - waiter queue: `/fairlock/jobs/export/_OWNERS_/<locker id>/<mode><attempt id>`,
//!   ordered by create revision; `<mode>` is `f` (fair: gets the lock handed
//!   over) or `u` (unfair: gets woken to try). The `<locker id>` level lets
//!   one long-lived watch per locker and key carry every touch for it.

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

    /// One waiter's queue key.
    pub fn waiter(&self, locker_id: &str, attempt: &str) -> Vec<u8> {
        let mut k = self.locker_queue(locker_id);
        k.extend_from_slice(attempt.as_bytes());
        k
    }
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
        assert_eq!(a.waiter("L", "x"), b"/p/a/_OWNERS_/L/x".to_vec());
        assert_eq!(prefix_end(b"/p/a/"), b"/p/a0".to_vec());
    }
}
