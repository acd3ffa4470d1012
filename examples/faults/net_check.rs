//! Checks only the network faults need, on top of the five in `check.rs`
//! (which apply to them unchanged: no overlap is excused by a cut, only by
//! a pause or by a lease etcd ended early).
//!
//! - A holder cut off (alone, or with an isolated leader; on Redis, the
//!   holder on a Sentinel master cut off from its replica, `redis_cutoff.rs`)
//!   is told before
//!   any other process is granted the lock: its guard's loss signal
//!   (`LOST`) fired, `is_held()` said no, or its fenced write was refused;
//!   or it had ended its critical section already (a request timed out).
//!   Checker 2. The note gives the loss signal's time on its own.
//! - A waiter cut off past its TTL is not handed a lock on its dead lease:
//!   its first grant after the heal is live (`is_held()` true, its fenced
//!   write not refused as lost). Checker 2. That it does not strand the
//!   queue is checker 4's recovery bound.

use crate::check::{Input, Violation};
use crate::events::Kind;
use crate::fault::Fault;
use crate::ms;
use crate::redis_fault::RedisFault;

pub fn check(inp: &Input<'_>, v: &mut Vec<Violation>, notes: &mut Vec<String>) {
    for inj in inp.injections.iter().filter(|i| !i.missed) {
        let (Some(proc), Some((cut, heal))) = (inj.target, inj.cut) else {
            continue;
        };
        let Some(p) = inp.log.procs.get(&proc) else {
            continue;
        };
        let label = inj.fault.label(inp.opts.ttl);
        match inj.fault {
            Fault::HolderCut | Fault::LeaderMinority | Fault::Redis(RedisFault::SentinelCutoff) => {
                let Some(acq) = p
                    .events
                    .iter()
                    .rev()
                    .find(|e| e.kind == Kind::Acq && e.t < cut)
                else {
                    continue;
                };
                let of_token = |e: &&crate::events::Ev| e.token == acq.token && e.t >= acq.t;
                let signal = p
                    .events
                    .iter()
                    .filter(of_token)
                    .find(|e| e.kind == Kind::Lost)
                    .map(|e| e.t);
                // Told: the loss signal fired, is_held() said no, or a
                // fenced write was refused; or the section had ended
                // already (its request timed out, it called unlock).
                let told = p
                    .events
                    .iter()
                    .filter(of_token)
                    .find(|e| {
                        matches!(e.kind, Kind::Lost | Kind::Rel)
                            || (e.kind == Kind::Held && e.detail == "0")
                            || (e.kind == Kind::Write && e.detail == "lost")
                    })
                    .map(|e| e.t);
                let since = |t: u64| format!("{:.0} ms", ms(t.saturating_sub(cut)));
                notes.push(format!(
                    "{label}: worker {proc} (token {}) told or done after {}, loss signal after \
                     {}; next grant to another worker after {}",
                    acq.token,
                    told.map_or("never".into(), since),
                    signal.map_or("never".into(), since),
                    inj.recovery.map_or("never".into(), since)
                ));
                let late = match (told, inj.recovery) {
                    (None, _) => true,
                    (Some(t), Some(r)) => t >= r,
                    (Some(_), None) => false,
                };
                if late {
                    // Its events from the grant on, times from the cut.
                    let mut events = String::new();
                    for e in p.events.iter().filter(|e| e.t >= acq.t).take(12) {
                        events.push_str(&format!(
                            "\n      {:+9.1} ms {} token={} {}",
                            (e.t as f64 - cut as f64) / 1e6,
                            e.kind.name(),
                            e.token,
                            e.detail
                        ));
                    }
                    v.push(Violation {
                        checker: 2,
                        t: Some(inj.start),
                        text: format!(
                            "{label}: worker {proc} holding token {} was not told of the loss \
                             before another worker was granted the lock (told: {}, granted: \
                             {}){events}",
                            acq.token,
                            told.map_or("never".into(), since),
                            inj.recovery.map_or("never".into(), since)
                        ),
                    });
                }
            }
            Fault::WaiterCut => {
                let Some(acq) = p.events.iter().find(|e| e.kind == Kind::Acq && e.t > heal) else {
                    continue;
                };
                let dead = p.events.iter().find(|e| {
                    e.token == acq.token
                        && ((e.kind == Kind::Held && e.detail == "0")
                            || (e.kind == Kind::Write && e.detail == "lost"))
                });
                let during = p
                    .events
                    .iter()
                    .filter(|e| e.kind == Kind::Acq && e.t >= cut && e.t <= heal)
                    .count();
                notes.push(format!(
                    "{label}: worker {proc} granted {during} time(s) while cut off; first grant \
                     after the heal (token {}) {}",
                    acq.token,
                    if dead.is_some() { "DEAD" } else { "live" }
                ));
                if let Some(e) = dead {
                    v.push(Violation {
                        checker: 2,
                        t: Some(inj.start),
                        text: format!(
                            "{label}: worker {proc}'s first grant after the heal (token {}) was \
                             on a dead lease: {} {}",
                            acq.token,
                            e.kind.name(),
                            e.detail
                        ),
                    });
                }
            }
            _ => {}
        }
    }
}
