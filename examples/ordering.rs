//! The ordering demo: P processes x T tasks ask for one lock, arriving a
//! fixed interval apart, each holding it for a while; in fair mode and then
//! in unfair mode. Prints every grant and a verdict: fair mode must grant in
//! arrival order; unfair mode reports how many grants were out of order.
//!
//! ```text
//! FAIRLOCK_ENDPOINTS=127.0.0.1:2379 cargo run --example ordering -- \
//!     [--processes 3] [--tasks 8] [--interval-ms 40] [--hold-ms 60] [--mode both|fair|unfair]
//! ```
//! `scripts/demo.sh` starts a throwaway etcd and runs it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Context, Key, Locker};

#[derive(Clone, Debug)]
struct Opts {
    processes: u64,
    tasks: u64,
    interval_ms: u64,
    hold_ms: u64,
    mode: String,
    worker: Option<u64>,
    start_ms: u64,
    prefix: String,
}

const USAGE: &str = "usage: ordering [--processes P] [--tasks T] [--interval-ms I] [--hold-ms H] \
                     [--mode both|fair|unfair]   (etcd from FAIRLOCK_ENDPOINTS, default 127.0.0.1:2379)";

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        processes: 3,
        tasks: 8,
        interval_ms: 40,
        hold_ms: 60,
        mode: "both".into(),
        worker: None,
        start_ms: 0,
        prefix: String::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        let number = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: {v:?} is not a number"))
        };
        match flag.as_str() {
            "--processes" => o.processes = number(value()?)?,
            "--tasks" => o.tasks = number(value()?)?,
            "--interval-ms" => o.interval_ms = number(value()?)?,
            "--hold-ms" => o.hold_ms = number(value()?)?,
            "--mode" => o.mode = value()?,
            "--worker" => o.worker = Some(number(value()?)?),
            "--start-ms" => o.start_ms = number(value()?)?,
            "--prefix" => o.prefix = value()?,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if !["both", "fair", "unfair"].contains(&o.mode.as_str()) {
        return Err(format!(
            "--mode must be both, fair or unfair, not {:?}",
            o.mode
        ));
    }
    if o.processes == 0 || o.tasks == 0 || o.processes * o.tasks > 1000 {
        return Err(
            "--processes and --tasks must be at least 1, with at most 1000 tasks in all".into(),
        );
    }
    Ok(o)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn main() -> ExitCode {
    let opts = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let result = match opts.worker {
        Some(process) => rt.block_on(worker(&opts, process)),
        None => rt.block_on(coordinator(&opts)),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ordering: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One process: `tasks` tasks sharing one locker (as in the seed, one
/// `GetLocker` per process), task j of process i arriving in slot j*P+i.
async fn worker(o: &Opts, process: u64) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let fair = o.mode == "fair";
    let config = EtcdConfig::from_env()?.with_prefix(o.prefix.clone());
    let locker = EtcdLocker::connect(config, fair).await?;
    let mut tasks = Vec::new();
    for task in 0..o.tasks {
        let (locker, o) = (locker.clone(), o.clone());
        tasks.push(tokio::spawn(async move {
            let slot = task * o.processes + process;
            let arrival = o.start_ms + slot * o.interval_ms;
            tokio::time::sleep(Duration::from_millis(arrival.saturating_sub(now_ms()))).await;
            let ctx = Context::background().with_timeout(Duration::from_secs(120));
            let guard = locker.lock(&ctx, &Key::from("my-key")).await?;
            let granted = now_ms();
            println!(
                "GRANT {process} {task} {slot} {} {} {}",
                arrival - o.start_ms,
                granted.saturating_sub(o.start_ms),
                guard.fencing_token()
            );
            std::io::stdout().flush()?;
            tokio::time::sleep(Duration::from_millis(o.hold_ms)).await;
            guard.unlock().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| e.to_string())?;
    }
    locker.close().await?;
    Ok(ExitCode::SUCCESS)
}

struct Grant {
    process: u64,
    task: u64,
    slot: u64,
    arrival_ms: u64,
    granted_ms: u64,
    token: u64,
}

/// Runs the workers for each mode, prints the grant table and the verdict.
async fn coordinator(o: &Opts) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let config = EtcdConfig::from_env()?;
    // Fail early, with a clear message, if etcd is not there.
    EtcdLocker::connect(config.clone(), true).await?;
    let modes: &[&str] = match o.mode.as_str() {
        "both" => &["fair", "unfair"],
        "fair" => &["fair"],
        _ => &["unfair"],
    };
    println!(
        "etcd {}: {} processes x {} tasks, one arrival every {} ms, each holds the lock {} ms",
        config.endpoints().join(","),
        o.processes,
        o.tasks,
        o.interval_ms,
        o.hold_ms
    );
    let mut fair_ok = true;
    for mode in modes {
        let grants = run_mode(o, mode, &config)?;
        let out_of_order = report(mode, &grants);
        if *mode == "fair" {
            fair_ok = out_of_order == 0 && grants.len() as u64 == o.processes * o.tasks;
        }
    }
    Ok(if fair_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn run_mode(
    o: &Opts,
    mode: &str,
    config: &EtcdConfig,
) -> Result<Vec<Grant>, Box<dyn std::error::Error>> {
    let prefix = format!("{}demo-{}/", config.prefix(), uuid::Uuid::new_v4().simple());
    let start_ms = now_ms() + 1500; // time for every process to connect first
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for p in 0..o.processes {
        children.push(
            Command::new(&exe)
                .args([
                    "--worker",
                    &p.to_string(),
                    "--mode",
                    mode,
                    "--prefix",
                    &prefix,
                ])
                .args([
                    "--processes",
                    &o.processes.to_string(),
                    "--tasks",
                    &o.tasks.to_string(),
                ])
                .args([
                    "--interval-ms",
                    &o.interval_ms.to_string(),
                    "--hold-ms",
                    &o.hold_ms.to_string(),
                ])
                .args(["--start-ms", &start_ms.to_string()])
                .stdout(Stdio::piped())
                .spawn()?,
        );
    }
    let mut grants = Vec::new();
    let mut failed = Vec::new();
    for (p, mut child) in children.into_iter().enumerate() {
        let stdout = child.stdout.take().ok_or("no stdout")?;
        for line in BufReader::new(stdout).lines() {
            let line = line?;
            let f: Vec<u64> = line
                .strip_prefix("GRANT ")
                .map(|rest| rest.split(' ').filter_map(|x| x.parse().ok()).collect())
                .unwrap_or_default();
            if let [process, task, slot, arrival_ms, granted_ms, token] = f[..] {
                grants.push(Grant {
                    process,
                    task,
                    slot,
                    arrival_ms,
                    granted_ms,
                    token,
                });
            }
        }
        if !child.wait()?.success() {
            failed.push(p);
        }
    }
    if !failed.is_empty() {
        return Err(format!("{mode} mode: worker processes {failed:?} failed").into());
    }
    grants.sort_by_key(|g| g.token);
    Ok(grants)
}

/// Prints the grants in grant order; returns how many came out of arrival
/// order (granted while an earlier arrival still waited).
fn report(mode: &str, grants: &[Grant]) -> usize {
    println!("\n== {mode} mode ==");
    println!(" #  process task  arrived  granted   waited  fencing token");
    let mut served = std::collections::BTreeSet::new();
    let mut out_of_order = 0;
    for (n, g) in grants.iter().enumerate() {
        // Out of order: some earlier arrival had not been served yet.
        let skipped = (0..g.slot).any(|s| !served.contains(&s));
        served.insert(g.slot);
        if skipped {
            out_of_order += 1;
        }
        println!(
            "{:>2}  {:>7} {:>4} {:>6}ms {:>6}ms {:>6}ms  {:>6}{}",
            n,
            g.process,
            g.task,
            g.arrival_ms,
            g.granted_ms,
            g.granted_ms.saturating_sub(g.arrival_ms),
            g.token,
            if skipped {
                "  <- ahead of an earlier arrival"
            } else {
                ""
            }
        );
    }
    if mode == "fair" {
        if out_of_order == 0 {
            println!(
                "verdict: fair mode granted all {} requests in strict arrival order",
                grants.len()
            );
        } else {
            println!(
                "verdict: FAIL: fair mode granted {out_of_order} of {} requests out of arrival order",
                grants.len()
            );
        }
    } else {
        println!(
            "verdict: unfair mode granted {out_of_order} of {} requests out of arrival order",
            grants.len()
        );
    }
    out_of_order
}
