//! Checkers of the election workload (`--workload election`), on the
//! section model of `shared_check.rs` (every section a leadership):
//! - checker 2: no two leaders within their deadlines at once, except
//!   behind a deposed leader whose fenced write was refused; then
//!   `check::pauses` for leaders paused past their TTL;
//! - checker 1: terms grow: leaders in grant order have growing terms,
//!   and the term key's values in etcd's history never go back; and every
//!   write etcd applied was fenced (`shared_check::fenced_history`): a
//!   deposed leader's write is refused;
//! - checker 6: observers converge: at the end the observer's last state
//!   is what `leader()` reads, both with a leader and with an empty seat
//!   (`run.rs`, `Phase::converge`, hands the findings in);
//! - recovery (4), harness and leftovers (5) as for the mutex.

use crate::check::{self, Input, Report, Violation};
use crate::shared_check::{Held, exclusion, fenced_history, sections, tokens_grow, writes};
use crate::workload::Section;

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
    tokens_grow(&inp, &leaders, Section::Leader, &mut v, &mut notes);
    fenced_history(&inp, &mut v, &mut notes);
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
    check::report(&inp, v, notes)
}
