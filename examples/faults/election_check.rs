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
use crate::shared_check::{
    Held, Writes, data_writes, exclusion, fenced_history, sections, tokens_grow, writes,
};
use crate::workload::Section;

/// One comparison of the observer's state with `leader()` at the end.
pub struct Finding {
    pub ok: bool,
    pub text: String,
}

/// The etcd run's checks: [`election`] on etcd's history, and every
/// write etcd applied fenced.
pub fn check(inp: Input<'_>, finale: Vec<Finding>) -> Report {
    let (mut v, mut notes) = (Vec::new(), Vec::new());
    let data = Writes {
        source: "etcd's history",
        list: data_writes(&inp, &mut v),
    };
    election(&inp, &data, finale, &mut v, &mut notes);
    fenced_history(&inp, &data, &mut v, &mut notes);
    check::report(&inp, v, notes)
}

/// The election workload's checks on any backend: on what the workers and
/// the observer reported, and on the data's writes as applied (`data`).
pub fn election(
    inp: &Input<'_>,
    data: &Writes<'_>,
    finale: Vec<Finding>,
    v: &mut Vec<Violation>,
    notes: &mut Vec<String>,
) {
    check::harness(inp, v);
    let all = sections(&inp.log);
    let leaders: Vec<&Held> = all.iter().collect();
    let excused = exclusion(&inp.log, &leaders, |_, _| true, v);
    notes.push(format!(
        "leaders: {} terms; {excused} overlaps behind a deposed leader refused a fenced write; \
         {} leaders outlived their deadline",
        leaders.len(),
        leaders.iter().filter(|h| h.outlived).count()
    ));
    tokens_grow(&leaders, Section::Leader, data, v, notes);
    check::pauses(inp, v, notes);
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
    writes(inp, notes);
}
