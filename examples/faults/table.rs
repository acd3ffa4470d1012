//! The report's table: a row per fault kind, and the violations.

use std::collections::HashMap;
use std::time::Duration;

use crate::Opts;
use crate::check::{Input, Report, Row, Violation};
use crate::events::Kind;
use crate::support::cluster::ELECTION_TIMEOUT;

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
    print_bounded(reports, o.ttl + ELECTION_TIMEOUT + o.margin)
}

/// [`print`] with the recovery bound the runs were held to.
pub fn print_bounded(reports: &[Report], bound: Duration) -> usize {
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
