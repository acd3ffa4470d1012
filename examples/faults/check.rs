//! The checkers, run on what the workers reported and on etcd's history,
//! and the table.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use crate::events::{Ev, Kind, Log};
use crate::fault::Injection;
use crate::history::Change;
use crate::support::cluster::ELECTION_TIMEOUT;
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
    counter(&inp, &mut v, &mut notes);
    let intervals = intervals(&inp.log);
    exclusion(&inp, &intervals, &mut v, &mut notes);
    pauses(&inp, &mut v, &mut notes);
    order(&inp, &mut v, &mut notes);
    crate::net_check::check(&inp, &mut v, &mut notes);
    recovery(&inp, &mut v, &mut notes);
    leftovers(&inp, &mut v);
    let rows = rows(&inp, &v);
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

/// The outcome a worker reported for each of its writes, and the token
/// it wrote under: `(proc, seq) -> (token, outcome)`.
fn writes(log: &Log) -> HashMap<(usize, u64), (u64, Option<String>)> {
    let mut w = HashMap::new();
    for (&n, p) in &log.procs {
        for e in &p.events {
            match e.kind {
                Kind::WriteStart | Kind::ProbeStart => {
                    w.insert((n, e.seq), (e.token, None));
                }
                Kind::Write | Kind::Probe => {
                    if let Some(entry) = w.get_mut(&(n, e.seq)) {
                        entry.1 = Some(e.detail.clone());
                    }
                }
                _ => {}
            }
        }
    }
    w
}

/// Checker 1: the counter's history is 1, 2, 3, ... (no lost or duplicated
/// update), each value was written while the writer's token was the lock
/// key's revision, every acknowledged write is in it exactly once, and no
/// write reported rejected is.
fn counter(inp: &Input<'_>, v: &mut Vec<Violation>, notes: &mut Vec<String>) {
    let writes = writes(&inp.log);
    let mut lock: Option<(i64, String)> = None;
    let mut seen: HashSet<(usize, u64)> = HashSet::new();
    let mut puts = 0u64;
    let mut indeterminate = 0;
    for c in &inp.changes {
        if c.key == inp.lock_key {
            lock = c.put.as_ref().map(|p| (c.revision, p.value.clone()));
            continue;
        }
        if c.key != inp.counter {
            continue;
        }
        let Some(put) = &c.put else {
            v.push(Violation {
                checker: 1,
                t: None,
                text: format!("the counter was deleted at revision {}", c.revision),
            });
            continue;
        };
        puts += 1;
        let f: Vec<&str> = put.value.split(' ').collect();
        let parsed = match f[..] {
            [n, proc, seq] => n
                .parse::<u64>()
                .ok()
                .zip(proc.parse::<usize>().ok())
                .zip(seq.parse::<u64>().ok()),
            _ => None,
        };
        let Some(((n, proc), seq)) = parsed else {
            v.push(Violation {
                checker: 1,
                t: None,
                text: format!("counter value {:?} is not `n proc seq`", put.value),
            });
            continue;
        };
        if n != puts {
            v.push(Violation {
                checker: 1,
                t: None,
                text: format!(
                    "update {puts} of the counter wrote {n} (revision {}, worker {proc} write \
                     {seq}): {}",
                    c.revision,
                    if n < puts {
                        "a lost update (two holders read the same value)"
                    } else {
                        "a skipped value"
                    }
                ),
            });
        }
        if !seen.insert((proc, seq)) {
            v.push(Violation {
                checker: 1,
                t: None,
                text: format!("worker {proc} write {seq} applied twice"),
            });
        }
        let Some((token, outcome)) = writes.get(&(proc, seq)) else {
            v.push(Violation {
                checker: 1,
                t: None,
                text: format!("counter write {proc}/{seq} that no worker reported starting"),
            });
            continue;
        };
        // The fence, checked on etcd's own record: the lock key was last
        // written at the writer's token when the write applied.
        let fenced = lock
            .as_ref()
            .is_some_and(|(rev, _)| u64::try_from(*rev).is_ok_and(|r| r == *token));
        if !fenced {
            v.push(Violation {
                checker: 1,
                t: None,
                text: format!(
                    "counter write {proc}/{seq} (token {token}) applied at revision {} while \
                     the lock key was {lock:?}",
                    c.revision
                ),
            });
        }
        match outcome.as_deref() {
            Some("ok") => {}
            Some(o) if o.starts_with("err") => indeterminate += 1,
            None => indeterminate += 1, // killed before it printed the answer
            Some(o) => v.push(Violation {
                checker: 1,
                t: None,
                text: format!(
                    "counter write {proc}/{seq} was applied (revision {}) but reported {o:?}",
                    c.revision
                ),
            }),
        }
    }
    let acked: Vec<_> = writes
        .iter()
        .filter(|(_, (_, o))| o.as_deref() == Some("ok"))
        .map(|(k, _)| *k)
        .collect();
    for k in &acked {
        if !seen.contains(k) {
            v.push(Violation {
                checker: 1,
                t: None,
                text: format!(
                    "acknowledged counter write {}/{} is not in etcd's history",
                    k.0, k.1
                ),
            });
        }
    }
    let unknown = writes
        .values()
        .filter(|(_, o)| o.as_ref().is_none_or(|o| o.starts_with("err")))
        .count();
    notes.push(format!(
        "counter: {puts} updates in etcd = {} acknowledged + {indeterminate} of {unknown} \
         indeterminate (no answer) that etcd applied",
        acked.len()
    ));
}

/// Critical sections per process, from its events.
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
    for (i, a) in intervals.iter().enumerate() {
        // One finding per earlier section, naming every later one it overlaps.
        let later: Vec<&Interval> = intervals[i + 1..]
            .iter()
            .take_while(|b| b.acq < a.end)
            .filter(|b| b.proc != a.proc)
            .collect();
        let Some(first) = later.first() else {
            continue;
        };
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
                Some(early) => {
                    etcd_ended += 1;
                    notes.push(format!(
                        "ETCD LEASE FAULT (not counted): {overlap}: the later grant came \
                         {early:.1} ms before the deadline the holder's lease had at its grant, \
                         etcd said that lease was gone before that deadline, and every write the \
                         holder tried after the later grant was refused (see docs/faults.md)\n{}",
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
/// time plus the TTL less a margin, never past etcd's own expiry); etcd
/// said the lease was gone when the holder asked after its loss, and that
/// answer came before the deadline too (`lease=gone` on its REL line,
/// written after the answer; a key deleted by anyone else leaves the lease
/// alive, and no lease expires on its own before that deadline); and no
/// write the holder tried after `b`'s grant was accepted. A correct etcd
/// ends a lease that early only when told to (a revoke); etcd 3.5.16 did
/// it on its own, when a paused leader resumed and revoked leases the new
/// leader had extended (etcd issues 12528, 15247). Returns how long before
/// the deadline `b` was granted, in ms.
fn etcd_ended_lease(inp: &Input<'_>, a: &Interval, b: &Interval) -> Option<f64> {
    let mine = after(&inp.log, a.proc, a.token, 0);
    let until: u64 = mine
        .iter()
        .find(|e| e.kind == Kind::Acq)?
        .detail
        .split(' ')
        .find_map(|f| f.strip_prefix("until="))?
        .parse()
        .ok()?;
    let gone = mine
        .iter()
        .any(|e| e.kind == Kind::Rel && e.detail == "lease=gone" && e.t < until);
    let refused = !after(&inp.log, a.proc, a.token, b.acq)
        .iter()
        .any(|e| matches!(e.kind, Kind::Write | Kind::Probe) && e.detail == "ok");
    (gone && refused && b.acq < until).then(|| ms(until - b.acq))
}

/// What a post-mortem of an overlap needs, without `--dump`: for the
/// earlier section and the first later one, the worker's events from the
/// end of its previous cycle to the section's end, its pauses (times
/// relative to the earlier section's start), then the lock key's history
/// around the two tokens.
fn explain(inp: &Input<'_>, a: &Interval, b: &Interval) -> String {
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
            for e in p.events.iter().filter(|e| e.t >= from && e.t <= s.end) {
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
    let (low, high) = (a.token.min(b.token), a.token.max(b.token));
    let window = i64::try_from(low).unwrap_or(0) - 3..=i64::try_from(high).unwrap_or(0) + 1;
    out.push_str("    lock key history:");
    for c in inp
        .changes
        .iter()
        .filter(|c| c.key == inp.lock_key && window.contains(&c.revision))
    {
        let what = c
            .put
            .as_ref()
            .map_or("delete".to_string(), |p| format!("put {}", p.value));
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

/// Checker 3: every grant in etcd's history went to the oldest live queue
/// entry (fair), or counts how many did not (unfair). Also: every grant a
/// worker reported is a lock-key write at its token, by its process.
fn order(inp: &Input<'_>, v: &mut Vec<Violation>, notes: &mut Vec<String>) {
    let queue_prefix = format!("{}/", inp.lock_key);
    let mut queue: BTreeMap<String, (i64, String)> = BTreeMap::new();
    let mut grants: HashMap<i64, String> = HashMap::new();
    let acq_time: HashMap<u64, (usize, u64)> = inp
        .log
        .procs
        .iter()
        .flat_map(|(&n, p)| {
            p.events
                .iter()
                .filter(|e| e.kind == Kind::Acq)
                .map(move |e| (e.token, (n, e.t)))
        })
        .collect();
    let (mut total, mut out_of_order) = (0, 0);
    let mut i = 0;
    while i < inp.changes.len() {
        let rev = inp.changes[i].revision;
        // Unfair waiters leave the queue in the txn that takes the lock, so
        // for them the queue as it was before the grant is what counts.
        let oldest_before = oldest(&queue);
        let mut granted = None;
        while i < inp.changes.len() && inp.changes[i].revision == rev {
            let c = &inp.changes[i];
            if c.key == inp.lock_key {
                granted = c.put.as_ref().map(|p| p.value.clone());
            } else if c.key.starts_with(&queue_prefix) {
                match &c.put {
                    Some(p) => {
                        // A fair grant appends the waiters behind the
                        // grantee to its queue value: the owner is line one.
                        let owner = p.value.lines().next().unwrap_or_default();
                        queue.insert(c.key.clone(), (p.create_revision, owner.to_string()));
                    }
                    None => {
                        queue.remove(&c.key);
                    }
                }
            }
            i += 1;
        }
        let Some(value) = granted else { continue };
        total += 1;
        grants.insert(rev, value.clone());
        let first = if inp.fair {
            oldest(&queue)
        } else {
            oldest_before
        };
        if let Some(first) = first.filter(|first| *first != value) {
            out_of_order += 1;
            if inp.fair {
                v.push(Violation {
                    checker: 3,
                    t: u64::try_from(rev)
                        .ok()
                        .and_then(|r| acq_time.get(&r))
                        .map(|&(_, t)| t),
                    text: format!(
                        "revision {rev}: the lock went to {value:?} while {first:?} was first \
                         in the queue"
                    ),
                });
            }
        }
    }
    for (&token, &(proc, t)) in &acq_time {
        let pid = inp.log.procs.get(&proc).map_or(0, |p| p.pid);
        let ok = i64::try_from(token)
            .ok()
            .and_then(|r| grants.get(&r))
            // Owner values read "<attempt> pid=<pid> host=... at=...".
            .is_some_and(|value| {
                let want = format!("pid={pid}");
                value.split_whitespace().any(|field| field == want)
            });
        if !ok {
            v.push(Violation {
                checker: 3,
                t: Some(t),
                text: format!(
                    "worker {proc} reported a grant at token {token}, but etcd's history has no \
                     lock-key write of its at that revision"
                ),
            });
        }
    }
    let reported: HashSet<i64> = acq_time
        .keys()
        .filter_map(|&t| i64::try_from(t).ok())
        .collect();
    let mut unreported: Vec<_> = grants
        .iter()
        .filter(|(rev, _)| !reported.contains(rev))
        .map(|(rev, value)| format!("{rev} ({value})"))
        .collect();
    unreported.sort();
    notes.push(format!(
        "grants no worker reported as acquired (lock returned an error, the waiter was killed, \
         or its session ended): {}",
        if unreported.is_empty() {
            "none".into()
        } else {
            unreported.join(", ")
        }
    ));
    let mut lock_errors: BTreeMap<String, usize> = BTreeMap::new();
    for e in inp.log.procs.values().flat_map(|p| &p.events) {
        if matches!(e.kind, Kind::LockErr | Kind::Err) {
            let what: String = e.detail.chars().take(90).collect();
            *lock_errors.entry(what).or_default() += 1;
        }
    }
    for (what, n) in lock_errors {
        notes.push(format!(
            "worker errors (expected under faults): {n} x {what}"
        ));
    }
    notes.push(format!(
        "grants in etcd's history: {total}; {out_of_order} not to the first in the queue{}",
        if inp.fair {
            ""
        } else {
            " (unfair mode may barge)"
        }
    ));
}

/// The value of the oldest live queue entry.
fn oldest(queue: &BTreeMap<String, (i64, String)>) -> Option<String> {
    queue
        .values()
        .min_by_key(|(created, _)| *created)
        .map(|(_, value)| value.clone())
}

/// One row per fault kind, plus one for the checks over the whole phase.
pub fn rows(inp: &Input<'_>, v: &[Violation]) -> Vec<Row> {
    let acqs: Vec<u64> = inp
        .log
        .procs
        .values()
        .flat_map(|p| p.events.iter().filter(|e| e.kind == Kind::Acq).map(|e| e.t))
        .collect();
    let window_of = |t: u64| {
        inp.injections
            .iter()
            .position(|i| i.start <= t && t < i.end.max(i.start + 1))
    };
    let mut rows: Vec<Row> = Vec::new();
    let mut row_of = HashMap::new();
    for (n, inj) in inp.injections.iter().enumerate() {
        let label = inj.fault.label(inp.opts.ttl);
        let r = *row_of.entry(label.clone()).or_insert_with(|| {
            rows.push(Row {
                label,
                injections: 0,
                cycles: 0,
                violations: 0,
                max_recovery: None,
                unrecovered: 0,
            });
            rows.len() - 1
        });
        let row = &mut rows[r];
        row.cycles += acqs.iter().filter(|&&t| window_of(t) == Some(n)).count();
        if inj.missed {
            continue;
        }
        row.injections += 1;
        let took = inj
            .recovery
            .map(|t| Duration::from_nanos(t - inj.measure_from));
        row.max_recovery = row.max_recovery.max(took);
        row.unrecovered += usize::from(took.is_none());
    }
    let mut whole = Row {
        label: "whole phase: counter, order, leftovers".into(),
        injections: 0,
        cycles: acqs.len(),
        violations: 0,
        max_recovery: None,
        unrecovered: 0,
    };
    for violation in v {
        let n = violation.t.and_then(window_of);
        match n.and_then(|n| row_of.get(&inp.injections[n].fault.label(inp.opts.ttl))) {
            Some(&r) => rows[r].violations += 1,
            None => whole.violations += 1,
        }
    }
    rows.push(whole);
    rows
}

/// Prints the table and every violation; returns how many there were.
pub fn print(reports: &[Report], o: &Opts) -> usize {
    let bound = o.ttl + ELECTION_TIMEOUT + o.margin;
    println!(
        "\n{:<7} {:<40} {:>10} {:>11} {:>10} {:>13}",
        "mode", "fault", "injections", "lock cycles", "violations", "max recovery"
    );
    let mut total = 0;
    for r in reports {
        for row in &r.rows {
            println!(
                "{:<7} {:<40} {:>10} {:>11} {:>10} {:>13}",
                r.mode,
                row.label,
                row.injections,
                row.cycles,
                row.violations,
                match (row.max_recovery, row.unrecovered) {
                    (_, 0) => row
                        .max_recovery
                        .map_or("-".into(), |d| format!("{} ms", d.as_millis())),
                    (_, n) => format!("never ({n}x)"),
                }
            );
        }
    }
    println!(
        "(recovery: first grant after the fault healed, or after the injection for holder \
         faults; bound {} ms)",
        bound.as_millis()
    );
    for r in reports {
        println!("\n{} phase:", r.mode);
        for n in &r.notes {
            println!("  {n}");
        }
        for v in &r.violations {
            println!("  VIOLATION (checker {}): {}", v.checker, v.text);
        }
        total += r.violations.len();
    }
    total
}
