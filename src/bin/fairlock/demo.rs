//! `fairlock demo`: P processes x T tasks ask for one lock, arriving a fixed
//! interval apart, each holding it for a while; fair mode, then unfair mode.
//! Prints every grant and a verdict: fair mode must grant in arrival order;
//! unfair mode reports how many grants came out of order. `--svg` draws the
//! hold intervals on a timeline.
//!
//! The workers are this same program, re-run with `demo --worker N`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fairlock::{BackendConfig, Context, Key};

use crate::args::DemoArgs;
use crate::backend::Conn;
use crate::{exit, report, svg};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub async fn run(config: BackendConfig, a: DemoArgs) -> u8 {
    let result = match a.worker {
        Some(process) => worker(config, &a, process).await,
        None => coordinator(config, &a).await,
    };
    result.unwrap_or_else(|e| {
        eprintln!("fairlock demo: {e}");
        1
    })
}

type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// One process: `tasks` tasks sharing one locker (as in the seed, one
/// `GetLocker` per process), task j of process i arriving in slot j*P+i.
async fn worker(config: BackendConfig, o: &DemoArgs, process: u64) -> Result<u8, AnyError> {
    let fair = o.mode == "fair";
    let conn = std::sync::Arc::new(Conn::connect(&config, fair).await?);
    let locker = std::sync::Arc::clone(&conn);
    let mut tasks = Vec::new();
    for task in 0..o.tasks {
        let (locker, o) = (locker.clone(), o.clone());
        tasks.push(tokio::spawn(async move {
            let slot = task * o.processes + process;
            let arrival = o.start_ms + slot * o.interval_ms;
            tokio::time::sleep(Duration::from_millis(arrival.saturating_sub(now_ms()))).await;
            let ctx = Context::background().with_timeout(Duration::from_secs(120));
            let guard = locker.locker().lock(&ctx, &Key::from("demo")).await?;
            let granted = now_ms();
            let token = guard.fencing_token();
            tokio::time::sleep(Duration::from_millis(o.hold_ms)).await;
            let released = now_ms();
            guard.unlock().await?;
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "GRANT {process} {task} {slot} {} {} {} {token}",
                arrival - o.start_ms,
                granted.saturating_sub(o.start_ms),
                released.saturating_sub(o.start_ms),
            )?;
            out.flush()?;
            Ok::<_, AnyError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    drop(locker);
    if let Ok(conn) = std::sync::Arc::try_unwrap(conn) {
        conn.close().await?;
    }
    Ok(0)
}

/// One grant, as reported by a worker.
pub struct Grant {
    pub process: u64,
    pub task: u64,
    pub slot: u64,
    pub arrival_ms: u64,
    pub granted_ms: u64,
    pub released_ms: u64,
    pub token: u64,
}

/// Runs the workers for each mode, prints the grant table and the verdict.
async fn coordinator(config: BackendConfig, o: &DemoArgs) -> Result<u8, AnyError> {
    // Fail early, with a clear message, if the servers are not there.
    if let Err(e) = Conn::connect(&config, false).await {
        report(&e);
        return Ok(exit::UNAVAILABLE);
    }
    let modes: &[&str] = match o.mode.as_str() {
        "both" => &["fair", "unfair"],
        "fair" => &["fair"],
        _ => &["unfair"],
    };
    println!(
        "{} {}: {} processes x {} tasks, one arrival every {} ms, each holds the lock {} ms",
        config.backend(),
        config.endpoints().join(","),
        o.processes,
        o.tasks,
        o.interval_ms,
        o.hold_ms
    );
    let mut fair_ok = true;
    let mut runs = Vec::new();
    for mode in modes {
        let config = config.clone();
        let o2 = o.clone();
        let mode2 = (*mode).to_owned();
        let grants = tokio::task::spawn_blocking(move || run_mode(&o2, &mode2, &config)).await??;
        let out_of_order = report_mode(mode, &grants);
        if *mode == "fair" {
            fair_ok = out_of_order == 0 && grants.len() as u64 == o.processes * o.tasks;
        }
        runs.push(((*mode).to_owned(), grants));
    }
    if let Some(path) = &o.svg {
        std::fs::write(path, svg::timeline(o, &runs))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!("\ntimeline written to {}", path.display());
    }
    Ok(if fair_ok { 0 } else { 1 })
}

fn run_mode(o: &DemoArgs, mode: &str, config: &BackendConfig) -> Result<Vec<Grant>, AnyError> {
    let prefix = format!("{}demo-{}/", config.prefix(), uuid::Uuid::new_v4().simple());
    let start_ms = now_ms() + 1500; // time for every process to connect first
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for p in 0..o.processes {
        let number = |n: u64| n.to_string();
        children.push(
            Command::new(&exe)
                .args(["--endpoints", &config.endpoints().join(",")])
                .args(["--prefix", &prefix, "demo", "--mode", mode])
                .args(["--worker", &number(p), "--start-ms", &number(start_ms)])
                .args(["--processes", &number(o.processes)])
                .args(["--tasks", &number(o.tasks)])
                .args(["--interval-ms", &number(o.interval_ms)])
                .args(["--hold-ms", &number(o.hold_ms)])
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
            if let [
                process,
                task,
                slot,
                arrival_ms,
                granted_ms,
                released_ms,
                token,
            ] = f[..]
            {
                grants.push(Grant {
                    process,
                    task,
                    slot,
                    arrival_ms,
                    granted_ms,
                    released_ms,
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
fn report_mode(mode: &str, grants: &[Grant]) -> usize {
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
    let n = grants.len();
    match (mode, out_of_order) {
        ("fair", 0) => {
            println!("verdict: fair mode granted all {n} requests in strict arrival order");
        }
        ("fair", k) => {
            println!("verdict: FAIL: fair mode granted {k} of {n} requests out of arrival order");
        }
        (_, k) => println!("verdict: unfair mode granted {k} of {n} requests out of arrival order"),
    }
    out_of_order
}
