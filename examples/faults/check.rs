//! The mutex workload's checkers, run on what the workers reported and on
//! etcd's history (checker 1 in `counter_check.rs`, 3 in `order_check.rs`),
//! and the pieces the other workloads' checkers share.

use std::time::Duration;

use crate::events::{Ev, Kind, Log};
use crate::fault::Injection;
use crate::history::Change;
use crate::{Opts, ms};

pub struct Input<'a> {
    pub fair: bool,
    pub opts: &'a Opts,
    pub log: Log,
    pub changes: Vec<Change>,
    pub injections: Vec<Injection>,
    pub lock_key: String,
    pub counter: String,
    /// Lock keys and leases still in etcd after the phase.
    pub leftovers: (Vec<String>, Vec<i64>),
}

#[cfg(feature = "redis")]
impl<'a> Input<'a> {
    /// A phase's input where there is no history to replay (Redis): the
    /// workers' log and the injections, taken, and the lock keys `left`.
    pub fn without_history(
        fair: bool,
        opts: &'a Opts,
        shared: &crate::events::Shared,
        injections: &mut Vec<Injection>,
        left: Vec<String>,
    ) -> Input<'a> {
        Input {
            fair,
            opts,
            log: std::mem::take(&mut *shared.lock()),
            changes: Vec::new(),
            injections: std::mem::take(injections),
            lock_key: String::new(),
            counter: String::new(),
            leftovers: (left, Vec::new()),
        }
    }
}

/// One broken promise.
pub struct Violation {
    /// Which checker (1-5, as in the issue; 0: the harness itself).
    pub checker: u8,
    /// When it happened (CLOCK_MONOTONIC), if known: picks the table row.
    pub t: Option<u64>,
    pub text: String,
}

pub struct Row {
    pub label: String,
    pub injections: usize,
    pub cycles: usize,
    pub violations: usize,
    pub max_recovery: Option<Duration>,
    /// Injections after which no lock was granted while we waited.
    pub unrecovered: usize,
}

pub struct Report {
    pub mode: &'static str,
    pub rows: Vec<Row>,
    pub violations: Vec<Violation>,
    pub notes: Vec<String>,
}

/// A critical section: from `lock` returning to the first of unlock, an
/// observed loss, or death.
pub struct Interval {
    pub proc: usize,
    pub token: u64,
    pub acq: u64,
    pub end: u64,
}

pub fn check(inp: Input<'_>) -> Report {
    let mut v = Vec::new();
    let mut notes = Vec::new();
    harness(&inp, &mut v);
    crate::counter_check::counter(&inp, &mut v, &mut notes);
    let intervals = intervals(&inp.log);
    exclusion(&inp, &intervals, &mut v, &mut notes);
    pauses(&inp, &mut v, &mut notes);
    crate::order_check::order(&inp, &mut v, &mut notes);
    crate::net_check::check(&inp, &mut v, &mut notes);
    report(&inp, v, notes)
}

/// Ends every workload's check alike: the checks of recovery (4) and of
/// what was left behind (5), then the table and the report.
pub fn report(inp: &Input<'_>, mut v: Vec<Violation>, mut notes: Vec<String>) -> Report {
    recovery(inp, &mut v, &mut notes);
    leftovers(inp, &mut v);
    let rows = crate::table::rows(inp, &v);
    Report {
        mode: if inp.fair { "fair" } else { "unfair" },
        rows,
        violations: v,
        notes,
    }
}

/// Checker 4: after each fault heals, a lock is granted again within the
/// injection's bound (or reported as known with `--known-slow`).
pub fn recovery(inp: &Input<'_>, v: &mut Vec<Violation>, notes: &mut Vec<String>) {
    for inj in inp.injections.iter().filter(|i| !i.missed) {
        let bound = inj.bound(inp.opts);
        let took = inj
            .recovery
            .map(|r| Duration::from_nanos(r - inj.measure_from));
        let label = inj.fault.label(inp.opts.ttl);
        let known = inp
            .opts
            .known_slow
            .as_ref()
            .is_some_and(|k| label.contains(k.as_str()));
        if took.is_none_or(|d| d > bound) && known {
            notes.push(format!(
                "KNOWN SLOW (--known-slow, not counted): {label}: no lock granted within {} ms \
                 (took {})",
                bound.as_millis(),
                took.map_or("forever".into(), |d| format!("{} ms", d.as_millis()))
            ));
        } else if took.is_none_or(|d| d > bound) {
            v.push(Violation {
                checker: 4,
                t: Some(inj.start),
                text: format!(
                    "{}: no lock granted within {} ms of {} (took {})",
                    inj.fault.label(inp.opts.ttl),
                    bound.as_millis(),
                    if inj.fault.on_holder() {
                        "the injection"
                    } else {
                        "healing"
                    },
                    took.map_or("forever".into(), |d| format!("{} ms", d.as_millis()))
                ),
            });
        }
    }
}

/// Checker 5: no keys under the lock prefix and no leases after the phase.
pub fn leftovers(inp: &Input<'_>, v: &mut Vec<Violation>) {
    let (keys, leases) = &inp.leftovers;
    if !keys.is_empty() || !leases.is_empty() {
        v.push(Violation {
            checker: 5,
            t: None,
            text: format!(
                "left behind after the phase: keys {keys:?}, leases {leases:x?} \
                 (waited TTL + election timeout + margin)"
            ),
        });
    }
}

/// Worker processes must speak the protocol and stop cleanly when asked.
pub fn harness(inp: &Input<'_>, v: &mut Vec<Violation>) {
    for (n, p) in &inp.log.procs {
        if !p.garbage.is_empty() {
            v.push(Violation {
                checker: 0,
                t: None,
                text: format!("worker {n} printed unparsable lines: {:?}", p.garbage),
            });
        }
        let bye = p.events.iter().any(|e| e.kind == Kind::Bye);
        if p.killed_at.is_none() && !bye {
            v.push(Violation {
                checker: 0,
                t: None,
                text: format!("worker {n} (pid {}) did not stop cleanly", p.pid),
            });
        }
    }
}

/// Critical sections per process, from its events.
/// Each critical section of `intervals` (sorted by grant) that another
/// worker's later ones overlap, with those later ones in grant order.
pub fn overlaps(intervals: &[Interval]) -> impl Iterator<Item = (&Interval, Vec<&Interval>)> {
    intervals.iter().enumerate().filter_map(|(i, a)| {
        let later: Vec<&Interval> = intervals[i + 1..]
            .iter()
            .take_while(|b| b.acq < a.end)
            .filter(|b| b.proc != a.proc)
            .collect();
        (!later.is_empty()).then_some((a, later))
    })
}

pub fn intervals(log: &Log) -> Vec<Interval> {
    let mut out = Vec::new();
    for (&proc, p) in &log.procs {
        let last = p.events.last().map_or(0, |e| e.t);
        let death = p.killed_at.unwrap_or(last);
        let mut open: Option<(u64, u64)> = None;
        for e in &p.events {
            let ends = match e.kind {
                Kind::Rel | Kind::Lost => true,
                Kind::Held => e.detail == "0",
                Kind::Write => e.detail == "lost",
                _ => false,
            };
            match (&open, e.kind == Kind::Acq) {
                (_, true) => {
                    if let Some((token, acq)) = open.take() {
                        out.push(Interval {
                            proc,
                            token,
                            acq,
                            end: e.t,
                        });
                    }
                    open = Some((e.token, e.t));
                }
                (Some((token, acq)), false) if ends && e.token == *token => {
                    out.push(Interval {
                        proc,
                        token: *token,
                        acq: *acq,
                        end: e.t,
                    });
                    open = None;
                }
                _ => {}
            }
        }
        if let Some((token, acq)) = open {
            out.push(Interval {
                proc,
                token,
                acq,
                end: death.max(acq),
            });
        }
    }
    out.sort_by_key(|i| i.acq);
    out
}

/// The pause of `proc` past its TTL inside `[from, to]`, if any.
fn pause_in(inp: &Input<'_>, proc: usize, from: u64, to: u64) -> Option<(u64, u64)> {
    let ttl = u64::try_from(inp.opts.ttl.as_nanos()).unwrap_or(u64::MAX);
    inp.injections
        .iter()
        .filter(|i| i.target == Some(proc))
        .filter_map(|i| i.pause)
        .find(|&(stop, cont)| stop >= from && stop <= to && cont - stop > ttl)
}

/// What `proc` did with `token` after `after`: its events for that token.
pub fn after(log: &Log, proc: usize, token: u64, after: u64) -> Vec<&Ev> {
    log.procs.get(&proc).map_or(Vec::new(), |p| {
        p.events
            .iter()
            .filter(|e| e.token == token && e.t > after)
            .collect()
    })
}

/// `None` if, after the pause, the holder saw the loss before its next
/// fenced write and every write it tried was refused; else what went wrong.
fn paused_holder_behaved(events: &[&Ev]) -> Option<String> {
    let first = events
        .iter()
        .find(|e| matches!(e.kind, Kind::Held | Kind::Lost | Kind::Write));
    if let Some(e) = first
        && e.kind == Kind::Held
        && e.detail == "1"
    {
        return Some("is_held() still said true after the pause".into());
    }
    if let Some(e) = events
        .iter()
        .find(|e| matches!(e.kind, Kind::Write | Kind::Probe) && e.detail == "ok")
    {
        return Some(format!(
            "its write {} after the pause was accepted{}",
            e.seq,
            if e.kind == Kind::Probe {
                " by etcd's token compare"
            } else {
                ""
            }
        ));
    }
    None
}

/// Checker 2: no two critical sections overlap, unless the earlier holder
/// was paused past its TTL and behaved after it.
fn exclusion(
    inp: &Input<'_>,
    intervals: &[Interval],
    v: &mut Vec<Violation>,
    notes: &mut Vec<String>,
) {
    let (mut excused, mut etcd_ended) = (0, 0);
    // One finding per earlier section, naming every later one it overlaps.
    for (a, later) in overlaps(intervals) {
        let first = later[0];
        let overlap = format!(
            "the critical section of worker {} (token {}) overlaps {} later one(s), by up to \
             {:.1} ms: tokens {:?}",
            a.proc,
            a.token,
            later.len(),
            ms(a.end - first.acq),
            later.iter().map(|b| b.token).collect::<Vec<_>>()
        );
        match pause_in(inp, a.proc, a.acq, a.end) {
            Some((_, cont)) => match paused_holder_behaved(&after(&inp.log, a.proc, a.token, cont))
            {
                None => excused += 1,
                Some(why) => v.push(Violation {
                    checker: 2,
                    t: Some(first.acq),
                    text: format!(
                        "{overlap}; it was paused past its TTL, but {why}\n{}",
                        explain(inp, a, first)
                    ),
                }),
            },
            None => match etcd_ended_lease(inp, a, first) {
                Some((early, ended)) => {
                    etcd_ended += 1;
                    notes.push(format!(
                        "ETCD LEASE FAULT (not counted): {overlap}: the later grant came \
                         {early:.1} ms before the deadline the holder's lease had at its grant, \
                         {ended}, and every write the holder tried after the later grant was \
                         refused (see docs/faults.md)\n{}",
                        explain(inp, a, first)
                    ));
                }
                None => v.push(Violation {
                    checker: 2,
                    t: Some(first.acq),
                    text: format!(
                        "{overlap}, and it was not paused\n{}",
                        explain(inp, a, first)
                    ),
                }),
            },
        }
    }
    notes.push(format!(
        "critical sections: {} in all; {excused} overlapped later ones, each held by a holder \
         paused past its TTL that saw the loss and had its writes refused; {etcd_ended} \
         overlapped because etcd ended a lease early",
        intervals.len()
    ));
}

/// Section `a` overlaps the later section `b` because etcd ended `a`'s
/// lease early: `b` was granted before the deadline `a`'s lease had at
/// its grant (`until=` on its ACQ line: the local deadline, which a
/// renewal moves only once etcd acknowledged it, to the renewal's send
/// time plus the TTL less a margin, never past etcd's own expiry); the
/// lease had ended by then; and no write the holder tried after `b`'s
/// grant was accepted. A correct etcd ends a lease that early only when
/// told to (a revoke); etcd 3.5 did it on its own, when a paused leader
/// resumed and revoked leases the new leader had extended (etcd issues
/// 12528, 15247). Returns how long before the deadline `b` was granted,
/// in ms, and the evidence that the lease had ended.
///
/// The evidence is etcd's history or its answer. In the history: the lock
/// key at `a`'s token was deleted in the same revision as the key the
/// worker put on the same lease (`worker::witness_key`), before `b`'s
/// grant: etcd deletes a lease's keys in one revision when it ends, and a
/// request deletes only the keys it names. Or in etcd's answer: it said
/// the lease was gone when the holder asked after its loss, before the
/// deadline (`lease=gone` on its REL line; no lease expires on its own
/// before that deadline). The answer can come too late when the deadline
/// is near (renewals went unanswered while a leader was stopped), the
/// history cannot.
fn etcd_ended_lease(inp: &Input<'_>, a: &Interval, b: &Interval) -> Option<(f64, String)> {
    let mine = after(&inp.log, a.proc, a.token, 0);
    let acq = &mine.iter().find(|e| e.kind == Kind::Acq)?.detail;
    let field = |name: &str| {
        acq.split(' ')
            .find_map(|f| f.strip_prefix(name))
            .map(str::to_string)
    };
    let until: u64 = field("until=")?.parse().ok()?;
    let lease = i64::from_str_radix(&field("lease=")?, 16).ok()?;
    let refused = !after(&inp.log, a.proc, a.token, b.acq)
        .iter()
        .any(|e| matches!(e.kind, Kind::Write | Kind::Probe) && e.detail == "ok");
    if !refused || b.acq >= until {
        return None;
    }
    let early = ms(until - b.acq);
    if let Some(rev) = lease_end(inp, a.token, b.token, lease) {
        return Some((
            early,
            format!(
                "etcd deleted the lock key at rev {rev} with the other key on its lease (the lease ended)"
            ),
        ));
    }
    mine.iter()
        .any(|e| e.kind == Kind::Rel && e.detail == "lease=gone" && e.t < until)
        .then(|| {
            (
                early,
                "etcd said that lease was gone before that deadline".into(),
            )
        })
}

/// The revision, between the grants at `token` and `next`, in which the
/// lock key granted at `token` was deleted together with the witness key
/// on `lease`; `None` if it was deleted alone (or not at all).
fn lease_end(inp: &Input<'_>, token: u64, next: u64, lease: i64) -> Option<i64> {
    let (from, to) = (i64::try_from(token).ok()?, i64::try_from(next).ok()?);
    let delete = inp
        .changes
        .iter()
        .find(|c| c.key == inp.lock_key && c.revision > from && c.revision < to)
        .filter(|c| c.put.is_none())?;
    let witness = crate::worker::witness_key(&inp.counter, lease);
    inp.changes
        .iter()
        .any(|c| c.key == witness && c.revision == delete.revision && c.put.is_none())
        .then_some(delete.revision)
}

/// What a post-mortem of an overlap needs, without `--dump`: for the
/// earlier section and the first later one, the worker's events from the
/// end of its previous cycle to the section's end, its pauses (times
/// relative to the earlier section's start), then the lock key's history
/// around the two tokens.
pub fn explain(inp: &Input<'_>, a: &Interval, b: &Interval) -> String {
    const LEAD: u64 = 2_000_000_000;
    let rel = |t: u64| (t as f64 - a.acq as f64) / 1e6;
    let mut out = String::new();
    for s in [a, b] {
        out.push_str(&format!("    worker {} (token {}):\n", s.proc, s.token));
        if let Some(p) = inp.log.procs.get(&s.proc) {
            // From the end of the worker's previous cycle (what led to
            // this grant), at most LEAD earlier.
            let from = p
                .events
                .iter()
                .rev()
                .find(|e| e.t < s.acq && matches!(e.kind, Kind::Unl | Kind::Start))
                .map_or(0, |e| e.t)
                .max(s.acq.saturating_sub(LEAD));
            // To the end of the cycle: what the holder learnt after.
            let to = p
                .events
                .iter()
                .find(|e| e.kind == Kind::Unl && e.token == s.token && e.t >= s.acq)
                .map_or(s.end, |e| e.t.max(s.end));
            for e in p.events.iter().filter(|e| e.t >= from && e.t <= to) {
                let kind = e.kind.name();
                out.push_str(&format!(
                    "      {:+9.1} ms {kind} token={} {}\n",
                    rel(e.t),
                    e.token,
                    e.detail
                ));
            }
        }
        for (stop, cont) in inp
            .injections
            .iter()
            .filter(|i| i.target == Some(s.proc))
            .filter_map(|i| i.pause)
        {
            let (stop, cont) = (rel(stop), rel(cont));
            out.push_str(&format!(
                "      paused from {stop:+.1} ms to {cont:+.1} ms\n"
            ));
        }
    }
    if inp.changes.is_empty() {
        // No history to show (Redis).
        return out.trim_end().to_string();
    }
    let (low, high) = (a.token.min(b.token), a.token.max(b.token));
    let window = i64::try_from(low).unwrap_or(0) - 3..=i64::try_from(high).unwrap_or(0) + 1;
    // With the deletes of the leases' witness keys: a lease that ended.
    let witnesses = crate::worker::witness_prefix(&inp.counter);
    out.push_str("    lock key history:");
    for c in inp.changes.iter().filter(|c| window.contains(&c.revision)) {
        let what = match (&c.put, c.key.strip_prefix(witnesses.as_str())) {
            (None, Some(lease)) => format!("delete of lease {lease}'s witness key"),
            (None, None) if c.key == inp.lock_key => "delete".to_string(),
            (Some(p), None) if c.key == inp.lock_key => format!("put {}", p.value),
            _ => continue,
        };
        out.push_str(&format!("\n      rev {} {what}", c.revision));
    }
    out
}

/// Checker 2, from the paused holder's side: after every pause past the
/// TTL it must see the loss, and no write of its may be accepted.
pub fn pauses(inp: &Input<'_>, v: &mut Vec<Violation>, notes: &mut Vec<String>) {
    let (mut fenced_local, mut fenced_etcd, mut after_write) = (0, 0, 0);
    for inj in inp.injections.iter().filter(|i| !i.missed) {
        let (Some(proc), Some((_, cont))) = (inj.target, inj.pause) else {
            continue;
        };
        let Some(acq) = inp.log.procs.get(&proc).and_then(|p| {
            p.events
                .iter()
                .rev()
                .find(|e| e.kind == Kind::Acq && e.t < inj.measure_from)
        }) else {
            continue;
        };
        let events = after(&inp.log, proc, acq.token, cont);
        if let Some(why) = paused_holder_behaved(&events) {
            v.push(Violation {
                checker: 2,
                t: Some(inj.start),
                text: format!(
                    "worker {proc} paused past its TTL holding token {}: {why}",
                    acq.token
                ),
            });
        }
        let wrote = |k: Kind, d: &str| events.iter().any(|e| e.kind == k && e.detail == d);
        if wrote(Kind::Write, "lost") {
            fenced_local += 1;
        } else {
            after_write += 1;
        }
        if wrote(Kind::Probe, "rejected") {
            fenced_etcd += 1;
        }
    }
    notes.push(format!(
        "paused holders: {fenced_local} had their fenced write refused after the pause \
         ({fenced_etcd} of them also by etcd's own compare); {after_write} were paused after \
         their write"
    ));
}
