//! The rows of `cost.rs`'s measurements, with the Go recipe in the same
//! run, and the summary lines that state them as the targets' ratios.

use std::time::Duration;

use crate::cost;
use crate::go_peer::{go_run, go_soak};
use crate::report::{Row, median};
use crate::workloads::{self, Res, Run};

/// The ratios the targets are stated in, from rows of this run.
pub fn print_summary(summary: &[String], json: bool) {
    if json {
        return;
    }
    println!();
    for line in summary {
        println!("{line}");
    }
}

/// etcd CPU and proposals per cycle on many keys (fairlock on one
/// connection, and the Go recipe), and the token ring against fair
/// handoffs.
pub async fn cost_rows(
    quick: bool,
    ep: &str,
    pid: Option<u32>,
    go: Option<&str>,
    dur: Duration,
    fair_handoffs: &[(usize, f64)],
    summary: &mut Vec<String>,
) -> Res<Vec<Row>> {
    let cpu = cost::EtcdCpu::new(pid);
    let mut rows = Vec::new();
    for tasks in [4, 32, 128] {
        let mut mine = Vec::new();
        // The third run shows what sending writes together saves.
        for (fair, batching, mode) in [
            (true, true, "fair"),
            (false, true, "unfair"),
            (true, false, "fair, writes not batched"),
        ] {
            let meter = cost::Meter::start(&cpu, ep)?;
            let run = cost::many_keys(ep, fair, batching, tasks, dur).await?;
            let row = Row::of(
                "cost: fairlock, own key per task, 1 conn",
                mode,
                tasks,
                tasks,
                &run,
            );
            mine.push((mode, run.per_s(), run.ops()));
            rows.push(meter.finish(row, run.ops())?);
        }
        let Some(bin) = go else { continue };
        // About as long as fairlock's run: a short Go run weighs its
        // session setup and warm-up too heavily.
        let n = (tasks * 150).max(if quick { 4000 } else { 12000 });
        let meter = cost::Meter::start(&cpu, ep)?;
        let go_run = go_run(bin, ep, "keys", tasks, n)?;
        let row = go_run.named("cost: Go concurrency.Mutex, own key per task", tasks);
        rows.push(meter.finish(row, go_run.ops)?);
        for (mode, per_s, _) in mine {
            summary.push(format!(
                "many keys, {tasks} tasks: fairlock {mode} / Go Mutex = {:.2} cycles/s",
                per_s / go_run.ops_per_s.max(1e-9)
            ));
        }
    }
    if let Some(bin) = go {
        let go_per_s = row_of(&rows, "cost: Go", "fair", 4).map_or(2000.0, |r| r.ops_per_s);
        alternating(ep, &cpu, bin, quick, go_per_s, summary).await?;
    }
    let cpu_of = |rows: &[Row], name: &str, mode: &str, tasks: usize| {
        row_of(rows, name, mode, tasks).and_then(|r| r.cpu_us_per_op)
    };
    for tasks in [4, 32, 128] {
        let go_cpu = cpu_of(&rows, "cost: Go", "fair", tasks);
        for mode in ["fair", "unfair", "fair, writes not batched"] {
            if let (Some(ours), Some(go_cpu)) =
                (cpu_of(&rows, "cost: fairlock", mode, tasks), go_cpu)
            {
                summary.push(format!(
                    "etcd CPU per cycle, {tasks} keys: fairlock {mode} {ours:.0} us, Go Mutex \
                     {go_cpu:.0} us ({:.2}x)",
                    ours / go_cpu
                ));
            }
        }
    }
    // Where the gap to the Go recipe comes from: the same raw cycle freed
    // by a plain delete (the Go recipe's shape, and a per-holder lock
    // entry's) and by a guarded txn (fairlock's shape), at 4 and 32 tasks.
    for tasks in [4, 32] {
        let mut raw = Vec::new();
        for (release, name) in [
            (
                cost::Release::Delete,
                "floor: raw txn create + plain delete, own key",
            ),
            (
                cost::Release::GuardedTxn,
                "floor: raw txn create + guarded txn delete, own key",
            ),
        ] {
            let meter = cost::Meter::start(&cpu, ep)?;
            let run = cost::raw_cycles(ep, release, tasks, dur).await?;
            let row = meter.finish(Row::of(name, "-", tasks, tasks, &run), run.ops())?;
            raw.push((run.per_s(), row.cpu_us_per_op));
            rows.push(row);
        }
        if let [(_, Some(delete)), (_, Some(guarded))] = raw[..] {
            summary.push(format!(
                "etcd CPU per raw cycle, {tasks} keys: freed by a plain delete {delete:.0} us, \
                 by a guarded txn {guarded:.0} us ({:+.0} us: the price of a txn)",
                guarded - delete
            ));
        }
        let go = row_of(&rows, "cost: Go", "fair", tasks).map(|r| r.ops_per_s);
        if let (Some(go), [(delete, _), (guarded, _)]) = (go, &raw[..]) {
            summary.push(format!(
                "raw cycles/s, {tasks} keys / Go Mutex: freed by a plain delete {:.2}, by a \
                 guarded txn {:.2}",
                delete / go.max(1e-9),
                guarded / go.max(1e-9)
            ));
        }
    }
    for &(clients, fair) in fair_handoffs {
        let meter = cost::Meter::start(&cpu, ep)?;
        let run = cost::ring(ep, clients, dur).await?;
        let row = Row::of(
            "floor: raw etcd token ring (1 put + 1 event)",
            "-",
            clients,
            1,
            &run,
        );
        rows.push(meter.finish(row, run.ops())?);
        summary.push(format!(
            "fair handoffs, {clients} clients: {:.2}x the token ring",
            fair / run.per_s().max(1e-9)
        ));
    }
    Ok(rows)
}

/// 4 tasks on 4 keys, fairlock fair, the Go recipe and two raw floors
/// taking turns, a few seconds each: at 4 tasks two single runs of the
/// same code differ by more (10-20 %, see performance.md) than fairlock
/// and the Go recipe do, so the 4-task target is read from the median of
/// these rounds' ratios. The floors split fairlock's gap to the Go recipe:
/// the guarded-txn cycle is the least any shared lock key with a fenced
/// release costs; fairlock's own txns made by hand add what its queue
/// costs (compares and else branches); the rest is fairlock's client.
async fn alternating(
    ep: &str,
    cpu: &cost::EtcdCpu,
    bin: &str,
    quick: bool,
    go_per_s: f64,
    summary: &mut Vec<String>,
) -> Res<()> {
    let (rounds, secs) = if quick { (4, 3.0) } else { (8, 8.0) };
    let dur = Duration::from_secs_f64(secs);
    // Per round, against the Go recipe: [fairlock fair, guarded floor,
    // fairlock's shape], each (cycles/s, etcd CPU per cycle).
    let mut ratios: [Vec<(f64, Option<f64>)>; 3] = Default::default();
    for _ in 0..rounds {
        let meter = cost::Meter::start(cpu, ep)?;
        let run = cost::many_keys(ep, true, true, 4, dur).await?;
        let ours = meter.finish(Row::of("-", "fair", 4, 4, &run), run.ops())?;
        let meter = cost::Meter::start(cpu, ep)?;
        let go_run = go_run(bin, ep, "keys", 4, (go_per_s * secs) as usize)?;
        let go = meter.finish(go_run.named("-", 4), go_run.ops)?;
        let mut rows = vec![ours];
        for release in [cost::Release::GuardedTxn, cost::Release::FairlockShape] {
            let meter = cost::Meter::start(cpu, ep)?;
            let run = cost::raw_cycles(ep, release, 4, dur).await?;
            rows.push(meter.finish(Row::of("-", "-", 4, 4, &run), run.ops())?);
        }
        for (list, row) in ratios.iter_mut().zip(&rows) {
            let cost = row.cpu_us_per_op.zip(go.cpu_us_per_op).map(|(a, b)| a / b);
            list.push((row.ops_per_s / go.ops_per_s.max(1e-9), cost));
        }
    }
    let list = |v: Vec<f64>| {
        let each: Vec<String> = v.iter().map(|x| format!("{x:.2}")).collect();
        format!("{} (median {:.2})", each.join(" "), median(v))
    };
    let names = [
        "fairlock fair",
        "raw guarded-txn cycle",
        "raw cycle of fairlock's own txns",
    ];
    for (name, v) in names.iter().zip(ratios) {
        let speed: Vec<f64> = v.iter().map(|r| r.0).collect();
        let cost: Vec<f64> = v.iter().filter_map(|r| r.1).collect();
        summary.push(format!(
            "4 keys, taking turns with Go Mutex, {rounds} rounds of {secs} s: {name} / Go \
             cycles/s {}",
            list(speed)
        ));
        if !cost.is_empty() {
            summary.push(format!(
                "4 keys, taking turns: {name} / Go etcd CPU per cycle {}",
                list(cost)
            ));
        }
    }
    Ok(())
}

/// The row of this run named starting with `name`, in `mode`, with `tasks`
/// clients.
fn row_of<'a>(rows: &'a [Row], name: &str, mode: &str, tasks: usize) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.name.starts_with(name) && r.mode == mode && r.clients == tasks)
}

/// Compacts etcd to its current revision and defragments it, disarming a
/// space alarm an earlier run raised: each soak then starts on an empty
/// history with etcd's whole space quota (etcd keeps every version until
/// it compacts: the Go soak that followed fairlock's 30-minute one once
/// stopped after 7 minutes at etcd's 2 GiB quota, "database space
/// exceeded"). Nothing is compacted during a soak. Only on the etcd the
/// bench started (`pid` known): a user's etcd (`--endpoints`) is left
/// alone.
async fn fresh_history(ep: &str) -> Res<()> {
    use etcd_client::{AlarmAction, AlarmType, CompactionOptions};
    let mut c = workloads::connect(ep).await?;
    let rev = c.get("/", None).await?.header().map_or(0, |h| h.revision());
    c.compact(rev, Some(CompactionOptions::new().with_physical()))
        .await?;
    c.defragment().await?;
    c.alarm(AlarmAction::Deactivate, AlarmType::Nospace, None)
        .await?;
    Ok(())
}

/// The soak, fairlock fair and the Go recipe, each for `secs` on a fresh
/// history (see [`fresh_history`]; etcd is not compacted during it).
pub async fn soak_rows(
    (secs, modes): (u64, &[bool]),
    ep: &str,
    pid: Option<u32>,
    go: Option<&str>,
    summary: &mut Vec<String>,
) -> Res<Vec<Row>> {
    if secs == 0 {
        return Ok(Vec::new());
    }
    let cpu = cost::EtcdCpu::new(pid);
    let dur = Duration::from_secs(secs);
    let window = Duration::from_secs(if secs >= 600 { 60 } else { (secs / 6).max(1) });
    let mut rows = Vec::new();
    let own_etcd = pid.is_some();
    for &fair in modes {
        if own_etcd {
            fresh_history(ep).await?;
        }
        let soak = cost::soak(ep, fair, (16, 4), dur, window, &cpu).await?;
        let last = soak.windows.len().saturating_sub(1);
        let mode = if fair { "fair" } else { "unfair" };
        let run = Run {
            lat: Vec::new(),
            elapsed: dur,
        };
        let mut row = Row::of(
            "soak: 16 own keys + 4 on one key, 1 conn",
            mode,
            20,
            17,
            &run,
        );
        row.ops = soak.windows.iter().sum();
        row.ops_per_s = row.ops as f64 / dur.as_secs_f64();
        rows.push(row.ratio(
            soak.per_s(last) / soak.per_s(0).max(1e-9),
            "last / first window",
        ));
        let cpu_line = match (soak.cpu_us_per_cycle(0), soak.cpu_us_per_cycle(last)) {
            (Some(a), Some(b)) => format!("; etcd CPU per cycle {a:.0} -> {b:.0} us"),
            _ => String::new(),
        };
        summary.push(format!(
            "soak fairlock {mode}, {secs} s, no compaction: {:.0} cycles/s in the first {}s window, \
             {:.0} in the last ({:.2}x){cpu_line}",
            soak.per_s(0),
            window.as_secs(),
            soak.per_s(last),
            soak.per_s(last) / soak.per_s(0).max(1e-9)
        ));
    }
    if let Some(bin) = go {
        if own_etcd {
            fresh_history(ep).await?;
        }
        match go_soak(bin, ep, secs, window.as_secs()) {
            Ok((first, last, ops)) => {
                let run = Run {
                    lat: Vec::new(),
                    elapsed: dur,
                };
                let mut row = Row::of(
                    "soak: Go concurrency.Mutex, same workload",
                    "fair",
                    20,
                    17,
                    &run,
                );
                row.ops = ops as usize;
                row.ops_per_s = ops / dur.as_secs_f64();
                rows.push(row.ratio(last / first.max(1e-9), "last / first window"));
                summary.push(format!(
                "soak Go Mutex, {secs} s: {first:.0} cycles/s in the first window, {last:.0} in the \
                 last ({:.2}x)",
                last / first.max(1e-9)
            ));
            }
            Err(e) => eprintln!("bench: Go soak gave no figures: {e}"),
        }
    }
    Ok(rows)
}
