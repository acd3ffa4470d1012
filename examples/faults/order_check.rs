//! Checker 3 of the mutex workload: grants in queue order, replayed from
//! etcd's history.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::check::{Input, Violation};
use crate::events::Kind;

/// Checker 3: every grant in etcd's history went to the oldest live queue
/// entry (fair), or counts how many did not (unfair). Also: every grant a
/// worker reported is a lock-key write at its token, by its process.
pub fn order(inp: &Input<'_>, v: &mut Vec<Violation>, notes: &mut Vec<String>) {
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
