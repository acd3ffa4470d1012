//! Checker 1 of the mutex workload: the fenced counter's history against
//! what the workers reported writing.

use std::collections::{HashMap, HashSet};

use crate::check::{Input, Violation};
use crate::events::{Kind, Log};

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
pub fn counter(inp: &Input<'_>, v: &mut Vec<Violation>, notes: &mut Vec<String>) {
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
