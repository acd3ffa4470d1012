//! Checkers of the shared workload (`--workload shared`), and the section
//! model the election workload's checkers use too.
//!
//! A section counts as held from its `ACQ` line to the first of its end
//! (as `check::intervals` finds it) and its deadline: the latest
//! `valid_until` the worker reported (`until=` on `ACQ`, then `UNTIL`).
//! Past that deadline the guard promises nothing; what a holder does
//! after it is for the fence to refuse (`check::pauses`). Within it:
//! - a writer holds the read/write lock alone, and at most `LIMIT`
//!   permits are held, except behind a holder that lost its lock and
//!   whose fenced write was refused (`refused_after`): what the fence is
//!   for when etcd ends a lease early (the revoke injection does);
//! - tokens of the write lock's grants never go back, by grant and in the
//!   data key's history (`tokens_grow`), and every write etcd applied was
//!   fenced: its holder's entry was unchanged when it landed
//!   (`fenced_history`), so a holder that lost its lock wrote nothing
//!   (checker 1);
//! - then the harness (0), recovery (4), paused holders (2) and leftovers
//!   (5) checkers of `check.rs`, as for the mutex.

use std::collections::HashMap;

use crate::check::{self, Input, Report, Violation};
use crate::events::{Kind, Log};
use crate::ms;
use crate::workload::{LIMIT, Section};

/// One critical section with what it held and until when.
pub struct Held {
    pub proc: usize,
    pub token: u64,
    pub kind: Section,
    pub acq: u64,
    /// The first of the section's end and its deadline.
    pub end: u64,
    /// The section ended after its deadline (a pause, a slow etcd).
    pub outlived: bool,
}

/// Every section of the phase, in grant order.
pub fn sections(log: &Log) -> Vec<Held> {
    check::intervals(log)
        .into_iter()
        .filter_map(|i| {
            let events = check::after(log, i.proc, i.token, 0);
            let acq = events.iter().find(|e| e.kind == Kind::Acq)?;
            let field = |name: &str| {
                acq.detail
                    .split(' ')
                    .find_map(|f| f.strip_prefix(name).map(str::to_string))
            };
            let kind = Section::parse(&field("kind=")?)?;
            let renewed = events
                .iter()
                .filter(|e| e.kind == Kind::Until && e.t <= i.end)
                .filter_map(|e| e.detail.parse::<u64>().ok());
            let deadline = field("until=")
                .and_then(|u| u.parse::<u64>().ok())
                .into_iter()
                .chain(renewed)
                .max()
                .filter(|&d| d > 0);
            let end = deadline.map_or(i.end, |d| i.end.min(d));
            Some(Held {
                proc: i.proc,
                token: i.token,
                kind,
                acq: i.acq,
                end: end.max(i.acq),
                outlived: end < i.end,
            })
        })
        .collect()
}

/// `true` if after `t` the holder of `s` learned it had lost the lock
/// from a refused fenced write (the library's, or etcd's compare alone),
/// and no write of its was accepted.
pub fn refused_after(log: &Log, s: &Held, t: u64) -> bool {
    let events = check::after(log, s.proc, s.token, t);
    let accepted = events
        .iter()
        .any(|e| matches!(e.kind, Kind::Write | Kind::Probe) && e.detail == "ok");
    let refused = events.iter().any(|e| {
        (e.kind == Kind::Write && e.detail == "lost")
            || (e.kind == Kind::Probe && e.detail == "rejected")
    });
    refused && !accepted
}

/// Pairs of sections that may not overlap (`exclusive(a, b)`): each later
/// grant within an earlier section's deadline is a violation of checker
/// 2 unless the earlier holder's write was refused after it. Returns how
/// many overlaps were excused.
pub fn exclusion(
    log: &Log,
    held: &[&Held],
    exclusive: impl Fn(&Held, &Held) -> bool,
    v: &mut Vec<Violation>,
) -> usize {
    let mut excused = 0;
    for (i, a) in held.iter().enumerate() {
        for b in held[i + 1..].iter().take_while(|b| b.acq < a.end) {
            if b.proc == a.proc || !exclusive(a, b) {
                continue;
            }
            if refused_after(log, a, b.acq) {
                excused += 1;
                continue;
            }
            v.push(Violation {
                checker: 2,
                t: Some(b.acq),
                text: format!(
                    "worker {} was granted {} (token {}) {:.1} ms before the deadline of worker \
                     {}'s {} (token {}), which was not refused a fenced write after it",
                    b.proc,
                    b.kind.name(),
                    b.token,
                    ms(a.end - b.acq),
                    a.proc,
                    a.kind.name(),
                    a.token
                ),
            });
        }
    }
    excused
}

/// At every permit grant, at most `LIMIT` permit sections within their
/// deadline, not counting holders refused a fenced write after it.
/// Returns the most permits seen held at once.
fn permits(log: &Log, held: &[&Held], v: &mut Vec<Violation>) -> usize {
    let mut most = 0;
    for b in held {
        let at_once: Vec<&&Held> = held
            .iter()
            .take_while(|a| a.acq <= b.acq)
            .filter(|a| a.end > b.acq || a.token == b.token)
            .filter(|a| a.token == b.token || !refused_after(log, a, b.acq))
            .collect();
        most = most.max(at_once.len());
        if at_once.len() > LIMIT as usize {
            v.push(Violation {
                checker: 2,
                t: Some(b.acq),
                text: format!(
                    "{} permits held at once (limit {LIMIT}) when worker {} was granted token \
                     {}: {:?} (worker, token)",
                    at_once.len(),
                    b.proc,
                    b.token,
                    at_once
                        .iter()
                        .map(|a| (a.proc, a.token))
                        .collect::<Vec<_>>()
                ),
            });
        }
    }
    most
}

/// The most read locks held at once within their deadlines: shows the
/// workload shared at all.
fn most_readers(held: &[&Held]) -> usize {
    held.iter()
        .filter(|b| b.kind == Section::Read)
        .map(|b| {
            held.iter()
                .filter(|a| a.kind == Section::Read && a.acq <= b.acq && a.end > b.acq)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The data's writes in the order they were applied: position (etcd: the
/// revision), token, value (`<kind> <token> <worker> <seq>`), and where
/// they were read.
pub struct Writes<'a> {
    pub source: &'static str,
    pub list: Vec<(i64, u64, &'a str)>,
}

/// The etcd run's checks: [`shared`] on etcd's history, and every write
/// etcd applied fenced.
pub fn check(inp: Input<'_>) -> Report {
    let (mut v, mut notes) = (Vec::new(), Vec::new());
    let data = Writes {
        source: "etcd's history",
        list: data_writes(&inp, &mut v),
    };
    shared(&inp, &data, &mut v, &mut notes);
    fenced_history(&inp, &data, &mut v, &mut notes);
    check::report(&inp, v, notes)
}

/// The shared workload's checks on any backend: on what the workers
/// reported, and on the data's writes as applied (`data`).
pub fn shared(inp: &Input<'_>, data: &Writes<'_>, v: &mut Vec<Violation>, notes: &mut Vec<String>) {
    check::harness(inp, v);
    let all = sections(&inp.log);
    let of = |kinds: &[Section]| -> Vec<&Held> {
        all.iter().filter(|h| kinds.contains(&h.kind)).collect()
    };
    let rw = of(&[Section::Read, Section::Write]);
    let writer = |a: &Held, b: &Held| a.kind == Section::Write || b.kind == Section::Write;
    let excused = exclusion(&inp.log, &rw, writer, v);
    let sem = of(&[Section::Permit]);
    let most = permits(&inp.log, &sem, v);
    let count = |k: Section| all.iter().filter(|h| h.kind == k).count();
    notes.push(format!(
        "sections: {} read, {} write, {} permit; at most {} readers and {most} of {LIMIT} \
         permits held at once; {excused} overlaps behind a writer or reader refused a fenced \
         write; {} sections outlived their deadline",
        count(Section::Read),
        count(Section::Write),
        count(Section::Permit),
        most_readers(&rw),
        all.iter().filter(|h| h.outlived).count()
    ));
    tokens_grow(&of(&[Section::Write]), Section::Write, data, v, notes);
    writes(inp, notes);
    check::pauses(inp, v, notes);
}

/// How the fenced writes went, and the errors workers met: for the notes.
pub fn writes(inp: &Input<'_>, notes: &mut Vec<String>) {
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    for e in inp.log.procs.values().flat_map(|p| &p.events) {
        let what = match e.kind {
            Kind::Write => format!("fenced write {}", e.detail),
            Kind::Probe => format!("compare-only write {}", e.detail),
            Kind::LockErr | Kind::Err => format!("worker error {}", e.detail),
            _ => continue,
        };
        *outcomes.entry(what.chars().take(90).collect()).or_default() += 1;
    }
    for (what, n) in outcomes {
        notes.push(format!("{n} x {what}"));
    }
}

/// The data key's writes in etcd's history: revision, token, and the value.
pub fn data_writes<'a>(inp: &'a Input<'_>, v: &mut Vec<Violation>) -> Vec<(i64, u64, &'a str)> {
    let puts = inp.changes.iter().filter(|c| c.key == inp.counter);
    let values = puts.filter_map(|c| Some((c.revision, c.put.as_ref()?.value.as_str())));
    parse_writes(values, v)
}

/// Writes `(position, value)` as [`Writes::list`] wants them; a value
/// not `<kind> <token> <worker> <seq>` (`sections.rs`) is a violation.
pub fn parse_writes<'a>(
    values: impl Iterator<Item = (i64, &'a str)>,
    v: &mut Vec<Violation>,
) -> Vec<(i64, u64, &'a str)> {
    let mut out = Vec::new();
    for (at, value) in values {
        match value.split(' ').nth(1).map(str::parse::<u64>) {
            Some(Ok(token)) => out.push((at, token, value)),
            _ => v.push(Violation {
                checker: 1,
                t: None,
                text: format!("data value {value:?} is not `kind token worker seq`"),
            }),
        }
    }
    out
}

/// Checker 1: the tokens of `kind`'s grants (an exclusive kind: write
/// locks, leaderships) grow in grant order, and its writes in the data
/// key's history never go back to an older token: a holder's write
/// applied after a newer holder's is what fencing prevents.
pub fn tokens_grow(
    held: &[&Held],
    kind: Section,
    data: &Writes<'_>,
    v: &mut Vec<Violation>,
    notes: &mut Vec<String>,
) {
    for pair in held.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b.token <= a.token {
            v.push(Violation {
                checker: 1,
                t: Some(b.acq),
                text: format!(
                    "worker {} was granted {} with token {} after worker {} with token {}",
                    b.proc,
                    kind.name(),
                    b.token,
                    a.proc,
                    a.token
                ),
            });
        }
    }
    let prefix = format!("{} ", kind.name());
    let mut last: Option<(u64, i64)> = None;
    let mut written = 0;
    for &(revision, token, value) in &data.list {
        if !value.starts_with(&prefix) {
            continue;
        }
        written += 1;
        if let Some((before, rev)) = last
            && token < before
        {
            v.push(Violation {
                checker: 1,
                t: None,
                text: format!(
                    "the data's {} writes in {} went back from token {before} (at {rev}) to \
                     {token} (at {revision}, {value:?}): an older holder's write was applied",
                    kind.name(),
                    data.source
                ),
            });
        }
        last = Some((token, revision));
    }
    notes.push(format!(
        "{} writes in {}: {written}, last token {}",
        kind.name(),
        data.source,
        last.map_or("none".into(), |(t, _)| t.to_string())
    ));
}

/// Checker 1: every write etcd applied to the data key was fenced, as
/// etcd's history shows it: a key put at the writer's token (its grant)
/// was not changed or deleted before the write's revision. A write after
/// the holder's entry went (its lease ended, it was deposed) is one the
/// fence should have refused.
pub fn fenced_history(
    inp: &Input<'_>,
    data: &Writes<'_>,
    v: &mut Vec<Violation>,
    notes: &mut Vec<String>,
) {
    let mut granted: HashMap<i64, Vec<&str>> = HashMap::new();
    let mut revisions: HashMap<&str, Vec<i64>> = HashMap::new();
    for c in inp.changes.iter().filter(|c| c.key != inp.counter) {
        if c.put.is_some() {
            granted.entry(c.revision).or_default().push(&c.key);
        }
        revisions.entry(&c.key).or_default().push(c.revision);
    }
    // The first change of `key` after `token` (changes are in revision order).
    let next_change = |key: &str, token: i64| {
        revisions
            .get(key)
            .and_then(|r| r.iter().copied().find(|&r| r > token))
    };
    let (mut fenced, mut unfenced) = (0, 0);
    for &(revision, token, value) in &data.list {
        let token = i64::try_from(token).unwrap_or(i64::MAX);
        let keys = granted.get(&token).map_or(&[][..], Vec::as_slice);
        let held = keys
            .iter()
            .any(|k| next_change(k, token).is_none_or(|r| r > revision));
        if held {
            fenced += 1;
            continue;
        }
        unfenced += 1;
        let gone = keys
            .iter()
            .filter_map(|k| next_change(k, token).map(|r| format!("{k} at revision {r}")))
            .collect::<Vec<_>>();
        v.push(Violation {
            checker: 1,
            t: None,
            text: format!(
                "write {value:?} was applied at revision {revision} though its holder's key \
                 was gone: {}",
                if gone.is_empty() {
                    format!("no key was put at its token {token}")
                } else {
                    format!("changed or deleted before it ({})", gone.join(", "))
                }
            ),
        });
    }
    notes.push(format!(
        "data key: {fenced} writes applied while their holder's key stood, {unfenced} after it \
         went"
    ));
}
