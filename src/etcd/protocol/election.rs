//! Leader election: the one key an election adds to its fair lock (the
//! value key), what it holds, and the txns and reads on it. Specified in
//! the "Leader election" section of `mod.rs`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{Compare, CompareOp, KeyValue, Txn, TxnOp, TxnResponse};

use super::fence::fence;
use super::keys::LockKeys;
use super::ops::{Repeatable, put_leased, range_at};
use crate::{Leader, Owner};

/// The value key's name under the lock's queue prefix: `P k/_OWNERS_/leader`.
/// Never a waiter's name (those are `<locker id>/<f|u><slot>`), so the lock
/// neither hands it the lock nor waits for it.
pub(crate) const VALUE_ENTRY: &str = "leader";

/// How many digits a term takes at the start of the value key's value:
/// fixed, so that comparing values as bytes compares terms.
const TERM_DIGITS: usize = 20;

/// The value key of the election whose lock has keys `keys`.
pub(crate) fn value_key(keys: &LockKeys) -> Vec<u8> {
    let mut key = keys.queue.clone();
    key.extend_from_slice(VALUE_ENTRY.as_bytes());
    key
}

/// `true` if `key` is the value key under queue prefix `queue`.
pub(crate) fn is_value_key(queue: &[u8], key: &[u8]) -> bool {
    key.strip_prefix(queue) == Some(VALUE_ENTRY.as_bytes())
}

/// What the value key holds, read back: a leader's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    /// The leader's term: the lock key's mod revision at its grant.
    pub term: i64,
    /// The leader's owner value (`e<uuid> pid=.. host=.. at=..`).
    pub owner: &'a str,
    /// When it was elected, by its clock.
    pub since: Option<SystemTime>,
    /// Its value.
    pub value: &'a [u8],
}

impl Record<'_> {
    /// The leader of election `name` this record shows.
    pub(crate) fn leader(&self, name: &str) -> Option<Leader> {
        Some(Leader {
            name: name.to_owned(),
            value: self.value.to_vec(),
            fencing_token: u64::try_from(self.term).ok()?,
            owner: Owner::parse(self.owner),
            since: self.since,
        })
    }
}

/// The value key's value: `<term, 20 digits> <owner> since=<unix ms>`, a
/// newline, then the leader's value as given (any bytes).
pub(crate) fn encode(term: i64, owner: &str, since: SystemTime, value: &[u8]) -> Vec<u8> {
    let ms = since
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut out = format!("{term:0TERM_DIGITS$} {owner} since={ms}\n").into_bytes();
    out.extend_from_slice(value);
    out
}

/// Reads back what [`encode`] wrote; `None` if fairlock did not write it.
pub(crate) fn decode(raw: &[u8]) -> Option<Record<'_>> {
    let end = raw.iter().position(|&b| b == b'\n')?;
    let (header, value) = (std::str::from_utf8(&raw[..end]).ok()?, &raw[end + 1..]);
    let (term, rest) = header.split_once(' ')?;
    if term.len() != TERM_DIGITS || !term.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (owner, since) = rest.rsplit_once(" since=")?;
    Some(Record {
        term: term.parse().ok()?,
        owner,
        since: since
            .parse()
            .ok()
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        value,
    })
}

/// The compares that hold exactly while the value key holds a record of
/// term `term`: its value starts with that term's digits. Values compare as
/// bytes, and every record starts with its term in [`TERM_DIGITS`] digits.
fn record_of_term(value_key: &[u8], term: i64) -> [Compare; 2] {
    [
        Compare::value(
            value_key.to_vec(),
            CompareOp::Greater,
            format!("{term:0TERM_DIGITS$}"),
        ),
        Compare::value(
            value_key.to_vec(),
            CompareOp::Less,
            format!("{:0TERM_DIGITS$}", term.saturating_add(1)),
        ),
    ]
}

/// A leader's write of its record `encoded` (of term `term`), on its lease
/// `lease`: applied only while the lock key is still the one granted at
/// `term` (the lock's fence), so a deposed leader's write fails.
pub(crate) fn proclaim(keys: &LockKeys, term: i64, lease: i64, encoded: &[u8]) -> Txn {
    Txn::new()
        .when([fence(&keys.lock, term)])
        .and_then([put_leased(&value_key(keys), encoded, lease)])
}

/// Deletes the value key if it holds a record of term `term`: a leader's
/// own, never its successor's.
pub(crate) fn retract(keys: &LockKeys, term: i64) -> Txn {
    let value_key = value_key(keys);
    Txn::new()
        .when(record_of_term(&value_key, term))
        .and_then([TxnOp::delete(value_key, None)])
}

/// The read of who leads: the lock key and the value key, at one revision.
pub(crate) fn read_leader(keys: &LockKeys) -> Repeatable {
    Repeatable::read(Txn::new().and_then([
        TxnOp::get(keys.lock.clone(), None),
        TxnOp::get(value_key(keys), None),
    ]))
}

/// What the answer to [`read_leader`] says: the value key's record, if it
/// is the current leader's (its term is the lock key's mod revision), as
/// the key-value it was read from; `None` when nobody leads (no lock key,
/// no record, or a record of an earlier term, before the new leader wrote
/// its own).
pub(crate) fn read_leader_answer(resp: &TxnResponse) -> Option<KeyValue> {
    let first = |i| range_at(resp, i).and_then(|g| g.kvs().first().cloned());
    let (lock, value) = (first(0)?, first(1)?);
    let record = decode(value.value())?;
    (record.term == lock.mod_revision()).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Key;

    #[test]
    fn records_round_trip_with_any_value() {
        let since = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        for value in [&b""[..], b"10.0.0.7:8080", b"two\nlines", &[0, 255, 10, 32]] {
            let raw = encode(42, "eabc pid=7 host=h at=1", since, value);
            let record = decode(&raw).expect("decodes");
            assert_eq!(record.term, 42);
            assert_eq!(record.owner, "eabc pid=7 host=h at=1");
            assert_eq!(record.since, Some(since));
            assert_eq!(record.value, value);
            assert!(raw.starts_with(b"00000000000000000042 "));
        }
        for stray in [
            &b"hello"[..],
            b"42 x since=1\nv",
            b"0000000000000000004x x since=1\nv",
        ] {
            assert_eq!(decode(stray), None);
        }
    }

    /// What etcd's byte comparison makes of [`record_of_term`]: values
    /// compared as `bytes.Compare` does (Rust's slice order is the same).
    #[test]
    fn the_term_compares_match_exactly_that_terms_records() {
        let matches = |value: &[u8], term: i64| {
            let low = format!("{term:0TERM_DIGITS$}").into_bytes();
            let high = format!("{:0TERM_DIGITS$}", term + 1).into_bytes();
            value > low.as_slice() && value < high.as_slice()
        };
        let at = UNIX_EPOCH;
        for (written, asked) in [(9, 9), (9, 10), (10, 9), (99, 100), (100, 99), (1, 12)] {
            let raw = encode(written, "o", at, b"v");
            assert_eq!(
                matches(&raw, asked),
                written == asked,
                "{written} vs {asked}"
            );
        }
        assert!(!matches(b"foreign", 9));
        assert!(!matches(b"", 9));
    }

    #[test]
    fn the_value_key_sits_under_the_queue_and_is_no_waiter() {
        let keys = LockKeys::new("/p/", &Key::from("web"));
        let key = value_key(&keys);
        assert_eq!(key, b"/p/web/_OWNERS_/leader".to_vec());
        assert!(is_value_key(&keys.queue, &key));
        assert!(!is_value_key(&keys.queue, b"/p/web/_OWNERS_/leaderx"));
        assert!(!super::super::keys::is_waiter(&keys.queue, &key, 7));
    }
}
