//! Checkers of the election workload (`--workload election`), on the
//! section model of `shared_check.rs` (every section a leadership):
//! - checker 2: no two leaders within their deadlines at once, except
//!   behind a deposed leader whose fenced write was refused; then
//!   `check::pauses` for leaders paused past their TTL;
//! - checker 1: terms grow: leaders in grant order have growing terms,
//!   and the term key's values in etcd's history never go back (a deposed
//!   leader's write of an older term, applied after a newer one, is what
//!   fencing prevents);
//! - checker 6: observers converge: at the end the observer's last state
//!   is what `leader()` reads, both with a leader and with an empty seat
//!   (`run.rs`, `Phase::converge`, hands the findings in);
//! - recovery (4), harness and leftovers (5) as for the mutex.

use crate::check::{self, Input, Report, Violation};
use crate::shared_check::{Held, exclusion, sections, writes};

/// One comparison of the observer's state with `leader()` at the end.
pub struct Finding {
    pub ok: bool,
    pub text: String,
}

pub fn check(inp: Input<'_>, finale: Vec<Finding>) -> Report {
    let (mut v, mut notes) = (Vec::new(), Vec::new());
    check::harness(&inp, &mut v);
    let all = sections(&inp.log);
    let leaders: Vec<&Held> = all.iter().collect();
    let excused = exclusion(&inp.log, &leaders, |_, _| true, &mut v);
    notes.push(format!(
        "leaders: {} terms; {excused} overlaps behind a deposed leader refused a fenced write; \
         {} leaders outlived their deadline",
        leaders.len(),
        leaders.iter().filter(|h| h.outlived).count()
    ));
    terms(&inp, &leaders, &mut v, &mut notes);
    check::pauses(&inp, &mut v, &mut notes);
    if finale.is_empty() {
        v.push(Violation {
            checker: 6,
            t: None,
            text: "the observers' convergence was not checked".into(),
        });
    }
    for f in finale {
        if f.ok {
            notes.push(format!("observer converged: {}", f.text));
        } else {
            v.push(Violation {
                checker: 6,
                t: None,
                text: format!("the observer did not converge: {}", f.text),
            });
        }
    }
    writes(&inp, &mut notes);
    check::recovery(&inp, &mut v, &mut notes);
    check::leftovers(&inp, &mut v);
    let rows = check::rows(&inp, &v);
    Report {
        mode: if inp.fair { "fair" } else { "unfair" },
        rows,
        violations: v,
        notes,
    }
}

/// Checker 1: terms grow, by grant and in the term key's history.
fn terms(inp: &Input<'_>, leaders: &[&Held], v: &mut Vec<Violation>, notes: &mut Vec<String>) {
    for pair in leaders.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b.token <= a.token {
            v.push(Violation {
                checker: 1,
                t: Some(b.acq),
                text: format!(
                    "worker {} was elected with term {} after worker {} with term {}",
                    b.proc, b.token, a.proc, a.token
                ),
            });
        }
    }
    // Values read `leader <term> <worker> <seq>` (sections.rs).
    let mut last: Option<(u64, i64)> = None;
    let mut written = 0;
    for c in inp.changes.iter().filter(|c| c.key == inp.counter) {
        let Some(put) = &c.put else { continue };
        let Some(term) = put
            .value
            .split(' ')
            .nth(1)
            .and_then(|t| t.parse::<u64>().ok())
        else {
            v.push(Violation {
                checker: 1,
                t: None,
                text: format!("term key value {:?} is not `leader term worker seq`", put.value),
            });
            continue;
        };
        written += 1;
        if let Some((before, rev)) = last
            && term < before
        {
            v.push(Violation {
                checker: 1,
                t: None,
                text: format!(
                    "the term key went back from term {before} (revision {rev}) to {term} \
                     (revision {}, {:?}): a deposed leader's write was applied",
                    c.revision, put.value
                ),
            });
        }
        last = Some((term, c.revision));
    }
    notes.push(format!(
        "term key: {written} writes in etcd's history, last term {}",
        last.map_or("none".into(), |(t, _)| t.to_string())
    ));
}
