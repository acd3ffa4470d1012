//! The checks of the Redis runs that need no server history (Redis has
//! none to replay): the counter, critical sections, fencing tokens. The
//! recovery bound (4) and the leftovers (5) are `check::report`'s.

use crate::check::{self, Input, Interval, Violation};
use crate::events::Kind;
use crate::ms;

/// Checker 1: the counter, written only through the fence, is at least
/// the acknowledged increments and at most those plus the indeterminate
/// ones (an error or no answer: applied or not).
pub fn counter(inp: &Input<'_>, counter: u64, v: &mut Vec<Violation>, notes: &mut Vec<String>) {
    let writes: Vec<&str> = inp
        .log
        .procs
        .values()
        .flat_map(|p| p.events.iter().filter(|e| e.kind == Kind::Write))
        .map(|e| e.detail.as_str())
        .collect();
    let acked = writes.iter().filter(|w| **w == "ok").count() as u64;
    let unknown = writes.iter().filter(|w| w.starts_with("err")).count() as u64;
    let refused = writes.iter().filter(|w| **w == "lost").count();
    notes.push(format!(
        "counter: {counter} in Redis; {acked} acknowledged, {unknown} indeterminate, \
         {refused} refused by the fence"
    ));
    if counter < acked || counter > acked + unknown {
        v.push(Violation {
            checker: 1,
            t: None,
            text: format!(
                "counter {counter} is outside [{acked}, {}]",
                acked + unknown
            ),
        });
    }
}

/// Checker 2: no two critical sections overlap, unless the earlier
/// holder's next fenced write after the later grant was refused by the
/// fence (and none of its writes after that grant was accepted): the
/// resource was then protected by the token, not by the lock.
pub fn exclusion(
    inp: &Input<'_>,
    intervals: &[Interval],
    v: &mut Vec<Violation>,
    notes: &mut Vec<String>,
) {
    let mut excused = 0;
    for (a, later) in check::overlaps(intervals) {
        let first = later[0];
        let writes: Vec<&str> = check::after(&inp.log, a.proc, a.token, first.acq)
            .into_iter()
            .filter(|e| e.kind == Kind::Write)
            .map(|e| e.detail.as_str())
            .collect();
        let fenced = writes.first() == Some(&"lost") && !writes.contains(&"ok");
        if fenced {
            excused += 1;
            continue;
        }
        v.push(Violation {
            checker: 2,
            t: Some(first.acq),
            text: format!(
                "the critical section of worker {} (token {}) overlaps {} later one(s), by up \
                 to {:.1} ms: tokens {:?}; its writes after the first later grant: {:?}\n{}",
                a.proc,
                a.token,
                later.len(),
                ms(a.end - first.acq),
                later.iter().map(|b| b.token).collect::<Vec<_>>(),
                writes,
                check::explain(inp, a, first)
            ),
        });
    }
    notes.push(format!(
        "critical sections: {} in all; {excused} overlapped later ones and had their next \
         write refused by the fence",
        intervals.len()
    ));
}

/// Checker 6: fencing tokens never go back: every grant's token is above
/// every token granted before it on the key (the workers lock one key).
/// One violation per injection window (or per phase) in which grants
/// started going back, naming the first and counting them (with the
/// rising run that follows each, wherever it ends).
/// A grant: (time, worker, token).
type Grant = (u64, usize, u64);

/// Grants going back in one window: the window, the first such grant, the
/// highest earlier one, how many.
struct Back {
    window: Option<usize>,
    first: Grant,
    top: Grant,
    count: usize,
}

pub fn tokens(inp: &Input<'_>, v: &mut Vec<Violation>, notes: &mut Vec<String>) {
    let grants = inp.log.grants_after(0);
    let window = |t: u64| {
        inp.injections
            .iter()
            .position(|i| i.start <= t && t < i.end.max(i.start + 1))
    };
    let mut found: Vec<Back> = Vec::new();
    let mut top: Option<Grant> = None;
    // The grant before, and whether it was already going back: a run of
    // rising tokens below the top (a restarted counter climbing again) is
    // one episode, counted in the window where it started.
    let mut last: Option<(u64, bool)> = None;
    let mut current = 0;
    for &(t, proc, token) in &grants {
        match top {
            Some(high) if token <= high.2 => {
                let continues = last.is_some_and(|(prev, back)| back && token > prev);
                if !continues {
                    let w = window(t);
                    current = match found.iter().position(|f| f.window == w) {
                        Some(at) => at,
                        None => {
                            found.push(Back {
                                window: w,
                                first: (t, proc, token),
                                top: high,
                                count: 0,
                            });
                            found.len() - 1
                        }
                    };
                }
                found[current].count += 1;
                last = Some((token, true));
            }
            _ => {
                top = Some((t, proc, token));
                last = Some((token, false));
            }
        }
    }
    let t0 = grants.first().map_or(0, |g| g.0);
    for b in &found {
        let ((t, proc, token), (ht, hp, high), n) = (b.first, b.top, b.count);
        v.push(Violation {
            checker: 6,
            t: Some(t),
            text: format!(
                "worker {proc} was granted token {token} at {:.1} ms, not above token {high} \
                 granted to worker {hp} at {:.1} ms; {n} grant(s) at or below the highest \
                 token before them from this fault's window on",
                ms(t - t0),
                ms(ht - t0),
            ),
        });
    }
    notes.push(format!(
        "fencing tokens: {} grants, {} not above every earlier token",
        grants.len(),
        found.iter().map(|f| f.count).sum::<usize>()
    ));
}
