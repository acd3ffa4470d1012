//! The election's protocol on Redis: its two names, the record's format,
//! the Lua scripts that change it, and how an observer orders what it
//! reads and what it is told. Pure: no connection, no `.await`.
//!
//! For election `jobs` under prefix `fairlock:` (on a cluster the name is
//! in the lock's hash tag, `fairlock:{jobs}/...`, so that every key is in
//! the lock's slot):
//! - the lock `fairlock:jobs` is the election's fair lock, `"<token>
//!   <owner>"` as every lock (the leader holds it, candidates queue);
//! - the record `fairlock:jobs/_OWNERS_/leader` holds the leader's value:
//!   `<term, 20 digits> <n, 10 digits> <owner> since=<unix ms>\n<value>`,
//!   where the term is the lock's token at the grant and `n` counts the
//!   leader's proclaims (1 for the campaign's value), with `PX ttl`,
//!   renewed every TTL/3 while the lock is held by that term;
//! - the channel of the same name carries every change of the record:
//!   `+<record>` when a leader writes it, `-<term>` when it is removed.
//!
//! Each change is one script, fenced: `PROCLAIM` writes only while the
//! lock's value starts with the leader's token, `RETRACT` and `REFRESH`
//! remove only the record of their own term. A leader is whoever's record
//! has the lock's current token as its term: a record left by an earlier
//! term (its lock expired or was taken over) is nobody.
//!
//! **Order for observers.** Every state has a [`Version`]: a leader's is
//! `(term, n)`; an empty seat's is `(t, MAX)`, where `t` is the last term
//! that can no longer write: the token of the lock's holder minus one
//! while a holder has not written its record yet, else the fencing
//! counter (every later term is above it). Versions grow with every
//! change, so an observer that reads the state and is also told of each
//! change on the channel (a message may have been sent before its read
//! and arrive after) keeps only what is newer than what it has: it never
//! goes back to an older state.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Script;
use std::sync::LazyLock;

use crate::redis::protocol::keys::{LockKeys, LockValue, leader_record};
use crate::{Key, Leader, Owner};

/// How many digits a term takes at the head of a record.
const TERM_DIGITS: usize = 20;

/// The Redis names of one election: `KEYS` of every script, and the
/// channel of its changes.
#[derive(Clone, Debug)]
pub(crate) struct ElectionKeys {
    pub lock: String,
    pub record: String,
    pub fence: String,
    pub channel: String,
}

impl ElectionKeys {
    /// The names of the election whose lock has keys `keys`.
    pub fn new(keys: &LockKeys) -> Self {
        let record = leader_record(&keys.lock);
        ElectionKeys {
            lock: keys.lock.clone(),
            fence: keys.fence.clone(),
            channel: record.clone(),
            record,
        }
    }

    /// `KEYS` of every script: `[lock, record, fence]`.
    pub fn script_keys(&self) -> [&str; 3] {
        [&self.lock, &self.record, &self.fence]
    }
}

/// A term as records write it: 20 digits.
pub(crate) fn padded(term: u64) -> String {
    format!("{term:0TERM_DIGITS$}")
}

/// What a leader passes to `PROCLAIM` for the record's tail: `<owner>
/// since=<unix ms>\n<value>` (the script writes term and count before it).
pub(crate) fn record_tail(owner: &str, since: SystemTime, value: &[u8]) -> Vec<u8> {
    let ms = since
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut out = format!("{owner} since={ms}\n").into_bytes();
    out.extend_from_slice(value);
    out
}

/// An election state's place in its history (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Version {
    term: u64,
    n: u64,
}

/// An empty seat's version after term `term`.
fn empty_after(term: u64) -> Version {
    Version { term, n: u64::MAX }
}

/// A record read back: its term, count and leader.
fn decode(name: &Key, raw: &[u8]) -> Option<(Version, Leader)> {
    let end = raw.iter().position(|&b| b == b'\n')?;
    let (header, value) = (std::str::from_utf8(&raw[..end]).ok()?, &raw[end + 1..]);
    let (term, rest) = header.split_once(' ')?;
    let (n, rest) = rest.split_once(' ')?;
    if term.len() != TERM_DIGITS || n.len() != 10 {
        return None;
    }
    let (owner, since) = rest.rsplit_once(" since=")?;
    let version = Version {
        term: term.parse().ok()?,
        n: n.parse().ok()?,
    };
    let leader = Leader {
        name: name.to_string(),
        value: value.to_vec(),
        fencing_token: version.term,
        owner: Owner::parse(owner),
        since: since
            .parse()
            .ok()
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
    };
    Some((version, leader))
}

/// The election's state as `READ` answers it: the lock's value and PTTL,
/// the record, the fencing counter.
#[derive(Debug, Default)]
pub(crate) struct Read {
    pub lock: Option<String>,
    pub pttl: i64,
    pub record: Option<Vec<u8>>,
    pub fence: Option<String>,
}

/// What an observer knows of an election at one point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct State {
    pub version: Version,
    pub leader: Option<Leader>,
}

impl Read {
    /// The state this read shows: a leader iff the record's term is the
    /// token of the lock's holder.
    pub fn state(&self, name: &Key) -> State {
        let holder = self
            .lock
            .as_deref()
            .and_then(LockValue::parse)
            .map(|v| v.token);
        if let (Some(token), Some((version, leader))) =
            (holder, self.record.as_deref().and_then(|r| decode(name, r)))
            && version.term == token
        {
            return State {
                version,
                leader: Some(leader),
            };
        }
        let last = match holder {
            Some(token) => token.saturating_sub(1),
            None => self
                .fence
                .as_deref()
                .and_then(|f| f.parse().ok())
                .unwrap_or(0),
        };
        State {
            version: empty_after(last),
            leader: None,
        }
    }

    /// How long until the holder's lock expires unless renewed, if held.
    pub fn expires_in(&self) -> Option<Duration> {
        u64::try_from(self.pttl).ok().map(Duration::from_millis)
    }
}

/// The state a message on the election's channel announces; `None` for a
/// message fairlock did not send.
pub(crate) fn announced(name: &Key, message: &[u8]) -> Option<State> {
    match message.split_first()? {
        (b'+', record) => decode(name, record).map(|(version, leader)| State {
            version,
            leader: Some(leader),
        }),
        (b'-', term) => Some(State {
            version: empty_after(std::str::from_utf8(term).ok()?.parse().ok()?),
            leader: None,
        }),
        _ => None,
    }
}

/// What every script starts with.
const HEAD: &str = r"
local lock, record = KEYS[1], KEYS[2]

-- The token of the lock's holder (its value's first word), or nil.
local function holder()
  local v = redis.pcall('GET', lock)
  if type(v) ~= 'string' then return nil end
  return string.match(v, '^(%d+) ')
end

-- The record's term (20 digits) and count, or nil; a record key of
-- another type fails the script when `strict` (someone else's data).
local function current(strict)
  local r = redis.pcall('GET', record)
  if type(r) == 'table' and r.err ~= nil then
    if strict then error({err = 'FAIRLOCK_FOREIGN 2 other'}) end
    return nil
  end
  if not r then return nil end
  return string.match(r, '^(' .. string.rep('%d', 20) .. ') (' .. string.rep('%d', 10) .. ') ')
end
";

/// Writes the record while the lock is held by `ARGV[1]`: `ARGV = [token,
/// padded term, tail, ttl ms, channel]`; 1 if written, 0 if not the
/// leader.
pub(crate) static PROCLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{HEAD}
if holder() ~= ARGV[1] then return 0 end
local term, n = current(true)
local next = 1
if term == ARGV[2] then next = tonumber(n) + 1 end
local value = ARGV[2] .. ' ' .. string.format('%010d', next) .. ' ' .. ARGV[3]
redis.call('SET', record, value, 'PX', ARGV[4])
redis.call('PUBLISH', ARGV[5], '+' .. value)
return 1
"
    ))
});

/// Removes the record of term `ARGV[1]` (padded), if it is still there:
/// `ARGV = [padded term, channel]`; 1 if removed.
pub(crate) static RETRACT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{HEAD}
if current(false) ~= ARGV[1] then return 0 end
redis.call('DEL', record)
redis.call('PUBLISH', ARGV[2], '-' .. ARGV[1])
return 1
"
    ))
});

/// Renews the record of term `ARGV[2]` while the lock is held by that
/// term (`ARGV = [token, padded term, ttl ms, channel]`), or removes it
/// when the lock is not; 1 while the leader, 0 once not.
pub(crate) static REFRESH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{HEAD}
if current(false) ~= ARGV[2] then return 0 end
if holder() ~= ARGV[1] then
  redis.call('DEL', record)
  redis.call('PUBLISH', ARGV[4], '-' .. ARGV[2])
  return 0
end
redis.call('PEXPIRE', record, ARGV[3])
return 1
"
    ))
});

/// Reads the state at one point: `[lock value, lock PTTL, record, fence]`
/// (values of another type read as nil).
pub(crate) static READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local function text(key)
  local v = redis.pcall('GET', key)
  if type(v) ~= 'string' then return false end
  return v
end
return {text(KEYS[1]), redis.call('PTTL', KEYS[1]), text(KEYS[2]), text(KEYS[3])}
",
    )
});

#[cfg(test)]
mod tests {
    use super::*;

    fn record(term: u64, n: u64, value: &str) -> Vec<u8> {
        let tail = record_tail("e1 pid=7 host=h at=5", UNIX_EPOCH, value.as_bytes());
        let mut out = format!("{} {n:010} ", padded(term)).into_bytes();
        out.extend_from_slice(&tail);
        out
    }

    fn read(lock: Option<&str>, record: Option<Vec<u8>>, fence: &str) -> Read {
        Read {
            lock: lock.map(str::to_owned),
            pttl: if lock.is_some() { 900 } else { -2 },
            record,
            fence: Some(fence.into()),
        }
    }

    #[test]
    fn a_record_of_the_holders_term_is_the_leader() {
        let name = Key::from("e");
        let state = read(Some("7 owner"), Some(record(7, 2, "v\n2")), "9").state(&name);
        let leader = state.leader.expect("a leader");
        assert_eq!(
            (leader.value.as_slice(), leader.fencing_token),
            (&b"v\n2"[..], 7)
        );
        assert_eq!(leader.owner.describe(), "h:7");
        assert_eq!(state.version, Version { term: 7, n: 2 });
    }

    #[test]
    fn versions_order_every_change_of_an_election() {
        let name = Key::from("e");
        let states = [
            read(None, None, "6").state(&name),        // free
            read(Some("7 o"), None, "7").state(&name), // granted, no record
            read(Some("7 o"), Some(record(7, 1, "a")), "7").state(&name), // elected
            read(Some("7 o"), Some(record(7, 2, "b")), "7").state(&name), // proclaimed
            announced(&name, format!("-{}", padded(7)).as_bytes()).expect("removal"),
            read(Some("9 o"), Some(record(7, 2, "b")), "9").state(&name), // a stale record
            read(Some("9 o"), Some(record(9, 1, "c")), "9").state(&name),
            read(None, Some(record(9, 1, "c")), "9").state(&name), // expired
        ];
        for pair in states.windows(2) {
            // A new state has a greater version; the same state (nobody
            // leads, before and after a grant) may keep its own.
            match (&pair[0].leader, &pair[1].leader) {
                (None, None) => assert!(pair[0].version <= pair[1].version, "{pair:?}"),
                _ => assert!(pair[0].version < pair[1].version, "{pair:?}"),
            }
        }
        let leaders: Vec<bool> = states.iter().map(|s| s.leader.is_some()).collect();
        assert_eq!(
            leaders,
            [false, false, true, true, false, false, true, false]
        );
    }

    #[test]
    fn messages_announce_what_the_scripts_write() {
        let name = Key::from("e");
        let mut message = b"+".to_vec();
        message.extend_from_slice(&record(3, 1, "x"));
        let state = announced(&name, &message).expect("a put");
        assert_eq!(state.leader.expect("a leader").value, b"x");
        assert!(announced(&name, b"?").is_none());
        assert!(announced(&name, b"-abc").is_none());
        assert!(announced(&name, b"+not a record").is_none());
    }

    #[test]
    fn record_names_are_recognised() {
        let keys = LockKeys::new(
            crate::redis::protocol::keys::Layout::Tagged,
            "p:",
            &Key::from("e"),
        );
        let names = ElectionKeys::new(&keys);
        assert_eq!(names.record, "p:{e}/_OWNERS_/leader");
        assert!(crate::redis::protocol::keys::is_leader_record(
            &names.record
        ));
        assert!(!crate::redis::protocol::keys::is_leader_record(&keys.queue));
    }
}
