//! Where a lock lives in Redis.
//!
//! For prefix `fairlock:` and key `jobs/export`:
//! - lock key `fairlock:jobs/export`, value `"<token> <owner>"`, `PX ttl`;
//! - queue `fairlock:jobs/export/_OWNERS_/queue` (sorted set of waiter ids);
//! - waiter records `fairlock:jobs/export/_OWNERS_/w/<id>`;
//! - the fencing counter `fairlock:_OWNERS_/fence`, one per prefix, the only
//!   key that outlives the locks (a token must never repeat);
//! - wake-up channels `fairlock:_OWNERS_/wake/<hub id>`, one per connection.
//!
//! Keys may not contain a `_OWNERS_` segment, so none of these names can be
//! another lock's key.

use crate::{Key, RESERVED_SEGMENT};

/// The Redis keys of one lock.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub lock: String,
    pub queue: String,
    /// Prefix of the waiter records.
    pub waiters: String,
    pub fence: String,
    /// Prefix of the wake-up channels.
    pub wake: String,
}

impl Layout {
    pub fn new(prefix: &str, key: &Key) -> Self {
        let lock = format!("{prefix}{key}");
        Layout {
            queue: format!("{lock}/{RESERVED_SEGMENT}/queue"),
            waiters: format!("{lock}/{RESERVED_SEGMENT}/w/"),
            fence: fence_key(prefix),
            wake: wake_prefix(prefix),
            lock,
        }
    }
}

/// The fencing counter of a prefix.
pub(crate) fn fence_key(prefix: &str) -> String {
    format!("{prefix}{RESERVED_SEGMENT}/fence")
}

/// The prefix of the wake-up channels.
pub(crate) fn wake_prefix(prefix: &str) -> String {
    format!("{prefix}{RESERVED_SEGMENT}/wake/")
}

/// The owner value of one attempt (see [`crate::owner`]), with the
/// locker's id: `<attempt> pid=<pid> host=<host> at=<unix ms> locker=<id>`.
pub(crate) fn owner_value(attempt: &str, locker: &str) -> String {
    crate::owner::owner_value(attempt, &format!("locker={locker}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_keys_cannot_be_lock_keys() {
        let a = Layout::new("p:", &Key::from("a"));
        assert_eq!(a.lock, "p:a");
        assert_eq!(a.queue, "p:a/_OWNERS_/queue");
        assert_eq!(a.waiters, "p:a/_OWNERS_/w/");
        assert_eq!(a.fence, "p:_OWNERS_/fence");
        // A key naming any of them is refused by Key::validate.
        for k in [&a.queue, &a.fence, &a.waiters] {
            let name = k.strip_prefix("p:").unwrap();
            assert!(Key::from(name).validate().is_err(), "{name}");
        }
        let owner = owner_value("fabc", "L1");
        assert!(owner.starts_with("fabc pid=") && owner.ends_with(" locker=L1"));
    }
}
