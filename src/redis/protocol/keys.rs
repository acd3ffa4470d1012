//! Everything fairlock writes to Redis, by name and by format: the keys of
//! a lock, the lock value, the waiter ids and records, and the wake-up
//! messages. The Lua scripts (`lock_lua.rs`) write the same formats; the
//! functions here build and read them on the Rust side.
//!
//! For prefix `fairlock:` and key `jobs/export`:
//! - lock key `fairlock:jobs/export`, value `"<token> <owner>"`, `PX ttl`;
//! - queue `fairlock:jobs/export/_OWNERS_/queue` (sorted set of waiter ids);
//! - waiter records `fairlock:jobs/export/_OWNERS_/w/<id>`, each
//!   `"<hub> <f|u> <record ttl ms> <owner>"`;
//! - the fencing counter `fairlock:_OWNERS_/fence`, one per prefix, and the
//!   epoch `fairlock:_OWNERS_/epoch` (`epoch.rs`), the only keys that
//!   outlive the locks (a token must never repeat, and a dataset that lost
//!   them must be told apart);
//! - wake-up channels `fairlock:_OWNERS_/wake/<hub id>`, one per connection;
//!   a message is the id of the one waiter it wakes;
//! - an election's leader record `fairlock:jobs/export/_OWNERS_/leader`,
//!   and its channel of the same name (format: `election/protocol.rs`).
//!
//! On a Redis Cluster ([`Layout::Tagged`]) the key is in a hash tag, so that
//! every key of one lock hashes to the same slot: lock key
//! `fairlock:{jobs/export}`, queue `fairlock:{jobs/export}/_OWNERS_/queue`,
//! waiter records `fairlock:{jobs/export}/_OWNERS_/w/<id>`, and a fencing
//! counter per lock, `fairlock:{jobs/export}/_OWNERS_/fence` (a counter per
//! prefix would live in one slot, which a script of another slot may not
//! touch), and an epoch per hash slot, `fairlock:_OWNERS_/epoch/{<n>}`.
//! Tokens still grow strictly per key.
//!
//! Keys may not contain a `_OWNERS_` segment, so none of these names can be
//! another lock's key.

use crate::redis::config::topology::Deployment;
use crate::redis::protocol::slots::slot_tag;
use crate::semantics::fairness::Fairness;
use crate::{Error, Key, RESERVED_SEGMENT, Result};

/// How the names of a lock's keys are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `<prefix><key>...`, one fencing counter per prefix.
    Flat,
    /// `<prefix>{<key>}...`: one hash slot per lock (Redis Cluster), a
    /// fencing counter per lock.
    Tagged,
}

impl Layout {
    /// The layout a deployment needs.
    pub fn of(deployment: &Deployment) -> Layout {
        match deployment {
            Deployment::Cluster => Layout::Tagged,
            _ => Layout::Flat,
        }
    }

    /// Checks that `key` can be laid out: in a hash tag `{<key>}` Redis
    /// hashes the text up to the first `}`, so a key that starts with one
    /// would leave the tag empty (and the lock's keys in different slots).
    pub fn check(self, key: &Key) -> Result<()> {
        if self == Layout::Tagged && key.as_str().starts_with('}') {
            return Err(Error::InvalidKey {
                key: key.to_string(),
                reason: "on Redis Cluster a key may not start with '}': fairlock puts each \
                         lock's keys in one hash slot with the hash tag {key}, which such a \
                         key would leave empty; use a key that starts with another character"
                    .into(),
            });
        }
        Ok(())
    }

    /// The name a lock's keys start with: `<prefix><key>` or
    /// `<prefix>{<key>}`.
    fn lock(self, prefix: &str, key: &str) -> String {
        match self {
            Layout::Flat => format!("{prefix}{key}"),
            Layout::Tagged => format!("{prefix}{{{key}}}"),
        }
    }

    /// The lock's name in a Redis key under `prefix` (with the prefix
    /// removed): `jobs/export` from `jobs/export/_OWNERS_/queue` or, tagged,
    /// from `{jobs/export}/_OWNERS_/queue`; `None` for the per-prefix keys
    /// (`_OWNERS_/...`) and names of another layout.
    pub fn lock_name(self, name: &str) -> Option<String> {
        let marker = format!("/{RESERVED_SEGMENT}/");
        if name.starts_with(&format!("{RESERVED_SEGMENT}/")) {
            return None;
        }
        match self {
            Layout::Flat => Some(
                name.split_once(&marker)
                    .map_or(name, |(lock, _)| lock)
                    .into(),
            ),
            Layout::Tagged => {
                let inner = name.strip_prefix('{')?;
                let lock = match inner.split_once(&format!("}}{marker}")) {
                    Some((lock, _)) => lock,
                    None => inner.strip_suffix('}')?,
                };
                Some(lock.to_owned())
            }
        }
    }
}

/// The Redis keys of one lock.
#[derive(Clone, Debug)]
pub(crate) struct LockKeys {
    pub lock: String,
    pub queue: String,
    /// Prefix of the waiter records.
    pub waiters: String,
    pub fence: String,
    /// The dataset's epoch (`epoch.rs`).
    pub epoch: String,
    /// Prefix of the wake-up channels.
    pub wake: String,
}

impl LockKeys {
    pub fn new(layout: Layout, prefix: &str, key: &Key) -> Self {
        let lock = layout.lock(prefix, key.as_str());
        LockKeys {
            queue: format!("{lock}/{RESERVED_SEGMENT}/queue"),
            waiters: format!("{lock}/{RESERVED_SEGMENT}/w/"),
            fence: match layout {
                Layout::Flat => fence_key(prefix),
                Layout::Tagged => format!("{lock}/{RESERVED_SEGMENT}/fence"),
            },
            wake: wake_prefix(prefix),
            epoch: match layout {
                Layout::Flat => epoch_key(prefix),
                Layout::Tagged => format!("{}/{{{}}}", epoch_key(prefix), slot_tag(&lock)),
            },
            lock,
        }
    }

    /// `KEYS` of every script: `[lock, queue, fence, epoch]`.
    pub fn script_keys(&self) -> [&str; 4] {
        [
            self.lock.as_str(),
            self.queue.as_str(),
            self.fence.as_str(),
            self.epoch.as_str(),
        ]
    }
}

/// The leader's record of the election whose lock key is `lock`.
pub(crate) fn leader_record(lock: &str) -> String {
    format!("{lock}/{RESERVED_SEGMENT}/leader")
}

/// `true` if Redis key `name` is an election's leader record.
pub(crate) fn is_leader_record(name: &str) -> bool {
    name.ends_with(&format!("/{RESERVED_SEGMENT}/leader"))
}

/// The fencing counter of a prefix.
pub(crate) fn fence_key(prefix: &str) -> String {
    format!("{prefix}{RESERVED_SEGMENT}/fence")
}

/// The epoch of a prefix (`epoch.rs`); on a cluster, followed by
/// `/{<n>}`, the hash tag of the slot it serves.
pub(crate) fn epoch_key(prefix: &str) -> String {
    format!("{prefix}{RESERVED_SEGMENT}/epoch")
}

/// The prefix of the wake-up channels.
pub(crate) fn wake_prefix(prefix: &str) -> String {
    format!("{prefix}{RESERVED_SEGMENT}/wake/")
}

/// The wake-up channel of the hub `hub` (a release publishes the id of the
/// waiter it serves there).
pub(crate) fn wake_channel(wake_prefix: &str, hub: &str) -> String {
    format!("{wake_prefix}{hub}")
}

/// The owner value of one attempt (see [`crate::api::owner`]), with the
/// locker's id: `<attempt> pid=<pid> host=<host> at=<unix ms> locker=<id>`.
pub(crate) fn owner_value(attempt: &str, locker: &str) -> String {
    crate::api::owner::owner_value(attempt, &format!("locker={locker}"))
}

/// The tag of a mode in waiter ids, records and the acquire script's
/// arguments: `f` (fair) or `u` (unfair).
pub(crate) fn mode_tag(fairness: Fairness) -> &'static str {
    match fairness {
        Fairness::Fair => "f",
        Fairness::Unfair => "u",
    }
}

/// The mode of a tag written by [`mode_tag`].
// `status.rs` reads lock values and waiter records with code of its own;
// these readers are its to use, and only the tests call them so far.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn parse_mode_tag(tag: &str) -> Option<Fairness> {
    match tag {
        "f" => Some(Fairness::Fair),
        "u" => Some(Fairness::Unfair),
        _ => None,
    }
}

/// A new waiter id: the mode's tag and a random uuid, `f<uuid>` or
/// `u<uuid>`; it names the queue member and the waiter record.
pub(crate) fn waiter_id(fairness: Fairness) -> String {
    format!("{}{}", mode_tag(fairness), uuid::Uuid::new_v4().simple())
}

/// The mode a waiter id was made for.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn waiter_fairness(id: &str) -> Option<Fairness> {
    parse_mode_tag(id.get(..1)?)
}

/// The value of a held lock key: `"<token> <owner>"`.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LockValue {
    pub token: u64,
    pub owner: String,
}

#[cfg_attr(not(test), allow(dead_code))]
impl LockValue {
    /// The value as the scripts write it.
    pub fn encode(&self) -> String {
        format!("{} {}", self.token, self.owner)
    }

    /// Reads a lock key's value; `None` for anything else.
    pub fn parse(value: &str) -> Option<Self> {
        let (token, owner) = value.split_once(' ')?;
        Some(LockValue {
            token: token.parse().ok()?,
            owner: owner.to_owned(),
        })
    }
}

/// A waiter record: `"<hub> <f|u> <record ttl ms> <owner>"`, where `hub`
/// names the wake-up channel the waiter listens on.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WaiterRecord {
    pub hub: String,
    pub fairness: Fairness,
    pub ttl_ms: u64,
    pub owner: String,
}

#[cfg_attr(not(test), allow(dead_code))]
impl WaiterRecord {
    /// The record as the acquire script writes it.
    pub fn encode(&self) -> String {
        format!(
            "{} {} {} {}",
            self.hub,
            mode_tag(self.fairness),
            self.ttl_ms,
            self.owner
        )
    }

    /// Reads a waiter record; `None` for anything else.
    pub fn parse(record: &str) -> Option<Self> {
        let mut parts = record.splitn(4, ' ');
        let hub = parts.next()?.to_owned();
        let fairness = parse_mode_tag(parts.next()?)?;
        let ttl_ms = parts.next()?.parse().ok()?;
        Some(WaiterRecord {
            hub,
            fairness,
            ttl_ms,
            owner: parts.next()?.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_keys_cannot_be_lock_keys() {
        let a = LockKeys::new(Layout::Flat, "p:", &Key::from("a"));
        assert_eq!(a.lock, "p:a");
        assert_eq!(a.queue, "p:a/_OWNERS_/queue");
        assert_eq!(a.waiters, "p:a/_OWNERS_/w/");
        assert_eq!(a.fence, "p:_OWNERS_/fence");
        assert_eq!(a.wake, "p:_OWNERS_/wake/");
        assert_eq!(
            a.script_keys(),
            [
                "p:a",
                "p:a/_OWNERS_/queue",
                "p:_OWNERS_/fence",
                "p:_OWNERS_/epoch"
            ]
        );
        // A key naming any of them is refused by Key::validate.
        for k in [&a.queue, &a.fence, &a.waiters, &a.wake, &a.epoch] {
            let name = k.strip_prefix("p:").unwrap();
            assert!(Key::from(name).validate().is_err(), "{name}");
        }
        assert_eq!(wake_channel(&a.wake, "h1"), "p:_OWNERS_/wake/h1");
    }

    #[test]
    fn tagged_keys_share_one_hash_tag() {
        let a = LockKeys::new(Layout::Tagged, "p:", &Key::from("jobs/a}b"));
        assert_eq!(a.lock, "p:{jobs/a}b}");
        assert_eq!(a.queue, "p:{jobs/a}b}/_OWNERS_/queue");
        assert_eq!(a.fence, "p:{jobs/a}b}/_OWNERS_/fence");
        assert_eq!(a.wake, "p:_OWNERS_/wake/");
        // The epoch is the slot's, in the lock's slot (`slots.rs`), and no
        // lock's name (Layout::lock_name).
        assert!(a.epoch.starts_with("p:_OWNERS_/epoch/{"), "{}", a.epoch);
        assert_eq!(Layout::Tagged.lock_name(&a.epoch["p:".len()..]), None);
        // Redis hashes the text between the first '{' and the first '}'
        // after it: the same for every key of the lock.
        let tag = |name: &str| {
            let open = name.find('{').unwrap();
            let close = open + 1 + name[open + 1..].find('}').unwrap();
            name[open + 1..close].to_owned()
        };
        for name in [&a.queue, &a.fence, &format!("{}x", a.waiters)] {
            assert_eq!(tag(name), tag(&a.lock), "{name}");
        }
        assert!(Layout::Tagged.check(&Key::from("}a")).is_err());
        assert!(Layout::Flat.check(&Key::from("}a")).is_ok());
        assert!(Layout::Tagged.check(&Key::from("a}")).is_ok());
    }

    #[test]
    fn lock_names_are_read_back_from_key_names() {
        for layout in [Layout::Flat, Layout::Tagged] {
            for key in ["a", "jobs/x}y", "a{b"] {
                let keys = LockKeys::new(layout, "p:", &Key::from(key));
                for name in [&keys.lock, &keys.queue, &keys.fence] {
                    let rest = name.strip_prefix("p:").unwrap();
                    let read = layout.lock_name(rest);
                    if layout == Layout::Flat && name == &keys.fence {
                        assert_eq!(read, None, "{name}");
                    } else {
                        assert_eq!(read.as_deref(), Some(key), "{layout:?} {name}");
                    }
                }
            }
        }
        assert_eq!(Layout::Tagged.lock_name("plain"), None);
    }

    #[test]
    fn owner_values_name_attempt_and_locker() {
        let owner = owner_value("fabc", "L1");
        assert!(owner.starts_with("fabc pid=") && owner.ends_with(" locker=L1"));
        let parsed = crate::Owner::parse(&owner);
        assert_eq!(parsed.field("locker"), Some("L1"));
    }

    #[test]
    fn waiter_ids_round_trip() {
        for fairness in [Fairness::Fair, Fairness::Unfair] {
            let id = waiter_id(fairness);
            assert_eq!(id.len(), 33, "{id}");
            assert_eq!(waiter_fairness(&id), Some(fairness));
            assert_eq!(parse_mode_tag(mode_tag(fairness)), Some(fairness));
        }
        assert_eq!(waiter_fairness(""), None);
        assert_eq!(waiter_fairness("x1"), None);
    }

    #[test]
    fn lock_values_round_trip() {
        let value = LockValue {
            token: 42,
            owner: "fabc pid=1 host=h at=5 locker=L".into(),
        };
        assert_eq!(value.encode(), "42 fabc pid=1 host=h at=5 locker=L");
        assert_eq!(LockValue::parse(&value.encode()), Some(value));
        assert_eq!(LockValue::parse(""), None);
        assert_eq!(LockValue::parse("x owner"), None);
    }

    #[test]
    fn waiter_records_round_trip() {
        let record = WaiterRecord {
            hub: "hub1".into(),
            fairness: Fairness::Unfair,
            ttl_ms: 3000,
            owner: "uabc pid=1 host=h locker=L".into(),
        };
        assert_eq!(record.encode(), "hub1 u 3000 uabc pid=1 host=h locker=L");
        assert_eq!(WaiterRecord::parse(&record.encode()), Some(record));
        assert_eq!(WaiterRecord::parse("hub x 1 o"), None);
        assert_eq!(WaiterRecord::parse("hub f 1"), None);
    }
}
