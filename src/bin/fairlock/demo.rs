//! `fairlock demo`: worker processes ask for one lock on etcd, fair mode
//! then unfair mode, and each grant is judged against the order in which
//! etcd saw the requests arrive.
//!
//! The workload (see `demo/worker.rs`): each process asks again as soon as
//! it releases. Fair mode queues that new request behind everyone waiting,
//! so the processes take turns; unfair mode lets it take the lock whenever
//! it finds it free, ahead of waiters that asked earlier, who wait longer. Prints every grant, a verdict per mode
//! (fair mode must grant in strict arrival order), the modes' figures side
//! by side, and with `--svg` a timeline (`svg.rs`).
//!
//! - `demo/worker.rs`: one worker process (this program, re-run with
//!   `demo --worker N`), printing a `demo/record.rs` line per grant;
//! - `demo/arrivals.rs`: the arrival order, replayed from etcd's history;
//! - `demo/judge.rs`: each grant against it; `demo/table.rs`: the output.

mod arrivals;
mod judge;
mod record;
mod svg;
mod table;
mod worker;

use std::io::Write;
use std::process::Stdio;

use etcd_client::Client;
use fairlock::BackendConfig;
use fairlock::etcd::{EtcdConfig, EtcdLocker};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::args::DemoArgs;
use crate::exit::{self, report};
use judge::ModeRun;
use record::{AnyError, Request};

/// Time for every worker process to connect before the first request.
const START_DELAY_MS: u64 = 1500;

pub async fn run(config: BackendConfig, a: DemoArgs) -> u8 {
    let config = match config {
        BackendConfig::Etcd(c) => c,
        other => {
            eprintln!(
                "fairlock demo: the demo runs on etcd only, not {}: it judges each grant by \
                 the revision at which etcd saw the request arrive",
                other.backend()
            );
            return exit::USAGE;
        }
    };
    let result = match a.worker {
        Some(process) => worker::run(config, &a, process).await.map(|()| 0),
        None => coordinator(config, &a).await,
    };
    result.unwrap_or_else(|e| {
        eprintln!("fairlock demo: {e}");
        1
    })
}

/// Runs the workers for each mode and prints the grants, the verdicts and
/// the summary; 0 if fair mode (when run) kept arrival order.
async fn coordinator(config: EtcdConfig, o: &DemoArgs) -> Result<u8, AnyError> {
    let locker = match EtcdLocker::connect(config.clone(), false).await {
        Ok(locker) => locker,
        Err(e) => {
            report(&e);
            return Ok(exit::of(&e));
        }
    };
    let mut client = locker.client().clone();
    let modes: &[&str] = match o.mode.as_str() {
        "both" => &["fair", "unfair"],
        "fair" => &["fair"],
        _ => &["unfair"],
    };
    let mut out = std::io::stdout();
    writeln!(
        out,
        "etcd {}: {}",
        config.endpoints().join(","),
        workload(o)
    )?;
    let mut runs = Vec::new();
    for mode in modes {
        let run = run_mode(&config, &mut client, o, mode).await?;
        table::print_run(&mut out, &run)?;
        runs.push(run);
    }
    if runs.len() > 1 {
        table::print_summary(&mut out, &runs)?;
    }
    if let Some(path) = &o.svg {
        std::fs::write(path, svg::render(&picture(o, &runs)))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        writeln!(out, "\ntimeline written to {}", path.display())?;
    }
    locker.close().await?;
    let fair_kept = runs
        .iter()
        .filter(|r| r.mode == "fair")
        .all(ModeRun::is_fair);
    Ok(if fair_kept { 0 } else { 1 })
}

/// The workload in words.
fn workload(o: &DemoArgs) -> String {
    let who = match o.processes {
        1 => "1 process asks".to_owned(),
        p => format!("{p} processes each ask"),
    };
    let stagger = if o.processes > 1 {
        format!(", process p first at p x {} ms", o.interval_ms)
    } else {
        String::new()
    };
    format!(
        "{who} {} times, again as soon as they release{stagger}; each holds the lock {} ms",
        o.tasks, o.hold_ms
    )
}

/// One mode: starts the worker processes under a fresh prefix, collects
/// their grants, and judges them by the arrivals etcd saw.
async fn run_mode(
    config: &EtcdConfig,
    client: &mut Client,
    o: &DemoArgs,
    mode: &str,
) -> Result<ModeRun, AnyError> {
    let prefix = format!("{}demo-{}/", config.prefix(), uuid::Uuid::new_v4().simple());
    let since = arrivals::revision_now(client, &prefix).await?;
    let start_ms = worker::now_ms() + START_DELAY_MS;
    let exe = std::env::current_exe()?;
    let number = |n: u64| n.to_string();
    let mut workers = Vec::new();
    for p in 0..o.processes {
        let mut child = Command::new(&exe)
            .args(["--endpoints", &config.endpoints().join(",")])
            .args(["--prefix", &prefix, "demo", "--mode", mode])
            .args(["--worker", &number(p), "--start-ms", &number(start_ms)])
            .args(["--processes", &number(o.processes)])
            .args(["--tasks", &number(o.tasks)])
            .args(["--interval-ms", &number(o.interval_ms)])
            .args(["--hold-ms", &number(o.hold_ms)])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout from a worker")?;
        let lines = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            let mut requests = Vec::new();
            while let Some(line) = lines.next_line().await? {
                requests.extend(Request::parse(&line));
            }
            Ok::<_, std::io::Error>(requests)
        });
        workers.push((child, lines));
    }
    let mut requests = Vec::new();
    let mut failed = Vec::new();
    for (p, (mut child, lines)) in workers.into_iter().enumerate() {
        requests.extend(lines.await??);
        if !child.wait().await?.success() {
            failed.push(p);
        }
    }
    if !failed.is_empty() {
        return Err(format!("{mode} mode: worker processes {failed:?} failed").into());
    }
    let arrivals = arrivals::replay(client, &prefix, since).await?;
    let expected = usize::try_from(o.processes * o.tasks)?;
    ModeRun::judge(mode, requests, &arrivals, expected)
}

/// The timeline of the runs: a row per request in arrival order, coloured
/// by process.
fn picture(o: &DemoArgs, runs: &[ModeRun]) -> svg::Picture {
    let panels = runs
        .iter()
        .map(|run| {
            let mut grants = run.grants.clone();
            grants.sort_by_key(|g| g.arrival);
            svg::Panel {
                title: format!(
                    "{} mode: {} of {} out of arrival order, longest wait {} ms",
                    run.mode,
                    run.out_of_order(),
                    run.grants.len(),
                    run.longest_wait_ms()
                ),
                rows: grants
                    .iter()
                    .map(|g| {
                        let r = &g.request;
                        svg::Row {
                            label: format!("#{} p{}", g.arrival, r.process),
                            group: usize::try_from(r.process).unwrap_or(0),
                            asked_ms: r.asked_ms,
                            granted_ms: r.granted_ms,
                            released_ms: r.released_ms,
                            flagged: g.ahead_of > 0,
                            tooltip: format!(
                                "process {} request {}: arrival #{} (revision {}), asked at {} ms, \
                                 waited {} ms, held {}-{} ms, token {}",
                                r.process,
                                r.request,
                                g.arrival,
                                g.arrival_rev,
                                r.asked_ms,
                                r.wait_ms(),
                                r.granted_ms,
                                r.released_ms,
                                r.token
                            ),
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    let groups = (0..o.processes).map(|p| format!("process {p}")).collect();
    svg::Picture {
        title: format!("fairlock demo: {}", workload(o)),
        note: "A row per request, in the order etcd saw the requests arrive; \
               both runs on one time scale."
            .to_owned(),
        groups,
        panels,
    }
}
