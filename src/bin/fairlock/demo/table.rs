//! What the demo prints: each mode's grants, its verdict, and the modes'
//! figures side by side.

use std::io::{Result, Write};

use super::judge::ModeRun;

/// Prints the grants of one mode in grant order, then its verdict.
pub fn print_run(out: &mut impl Write, run: &ModeRun) -> Result<()> {
    writeln!(out, "\n== {} mode ==", run.mode)?;
    writeln!(
        out,
        " #  process req  arrival    (rev)   asked  granted   waited  fencing token"
    )?;
    for (n, g) in run.grants.iter().enumerate() {
        let r = &g.request;
        let note = match g.ahead_of {
            0 => String::new(),
            1 => "  <- ahead of 1 earlier arrival".to_owned(),
            k => format!("  <- ahead of {k} earlier arrivals"),
        };
        writeln!(
            out,
            "{n:>2}  {:>7} {:>3}  {:>7} {:>8}  {:>4}ms {:>6}ms {:>6}ms  {:>6}{note}",
            r.process,
            r.request,
            g.arrival,
            format!("({})", g.arrival_rev),
            r.asked_ms,
            r.granted_ms,
            r.wait_ms(),
            r.token,
        )?;
    }
    writeln!(out, "{}", run.verdict())
}

/// The modes' figures in one column each.
pub fn print_summary(out: &mut impl Write, runs: &[ModeRun]) -> Result<()> {
    let column = |f: &dyn Fn(&ModeRun) -> String| {
        runs.iter()
            .map(|r| format!("{:>12}", f(r)))
            .collect::<String>()
    };
    writeln!(out, "\n== summary ==")?;
    writeln!(out, "{:<14}{}", "", column(&|r| r.mode.clone()))?;
    writeln!(
        out,
        "{:<14}{}",
        "out of order",
        column(&|r| format!("{} of {}", r.out_of_order(), r.grants.len()))
    )?;
    writeln!(
        out,
        "{:<14}{}",
        "longest wait",
        column(&|r| format!("{} ms", r.longest_wait_ms()))
    )?;
    writeln!(
        out,
        "{:<14}{}",
        "mean wait",
        column(&|r| format!("{} ms", r.mean_wait_ms()))
    )
}
