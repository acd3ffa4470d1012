//! `bench --scale`: how fairlock's cost grows with the work, each curve
//! from one run on one server, with its floor (and a peer) from the same
//! run; tables on stdout, one SVG per curve (`--svg-dir`, default
//! `target/scale`).
//!
//! - **queue**: one key with 10 .. 10,000 fair waiters in a closed loop
//!   (each waiter locks, unlocks and queues again, so the queue stays that
//!   long), in one process and spread over processes: handoffs per second,
//!   the wait it means (queue length / rate), time to fill the queue,
//!   client and server memory per waiter, etcd CPU per handoff. Floor: a
//!   put seen by a watch (C+P, one handoff's round trips). Peer: etcd's Go
//!   `concurrency.Mutex` with as many clients (etcd only).
//! - **held** (`scale_held.rs`): 1 .. 100,000 keys held at once by one
//!   locker.
//! - **sessions** (`scale_sessions.rs`, etcd): 0 .. 1,000 idle locker
//!   processes.

use std::time::{Duration, Instant};

use fairlock::Key;

use crate::chart::{Chart, Series};
use crate::scale_procs::{Proc, Server, cpu_secs, finish_all, total_count, total_cpu};
use crate::scale_table::Table;
use crate::workloads::Res;

/// The sizes and lengths of one run.
pub struct Plan {
    pub queues: Vec<usize>,
    /// Processes the waiters of the spread queue curve run in.
    pub spread: usize,
    pub held: Vec<usize>,
    pub sessions: Vec<usize>,
    /// Waiters up to which the Go peer runs.
    pub go_max: usize,
    pub warm: Duration,
    pub window: Duration,
    /// How long renewals are counted: at least one renewal period of the
    /// curves' TTL (a third of it).
    pub renewals: Duration,
}

impl Plan {
    pub fn new(quick: bool) -> Plan {
        Plan {
            queues: vec![10, 100, 1000, 10_000],
            spread: 10,
            // 100,000 keys take minutes of this machine's disk: full runs only.
            held: if quick {
                vec![1, 1000, 10_000]
            } else {
                vec![1, 1000, 10_000, 100_000]
            },
            sessions: if quick {
                vec![0, 10, 100]
            } else {
                vec![0, 10, 100, 1000]
            },
            go_max: if quick { 100 } else { 1000 },
            warm: Duration::from_secs(if quick { 2 } else { 5 }),
            window: Duration::from_secs(if quick { 3 } else { 10 }),
            renewals: if quick {
                crate::scale_child::TTL / 3
            } else {
                crate::scale_child::TTL
            },
        }
    }
}

pub fn unique(what: &str) -> String {
    format!("/bench/scale-{what}-{}/", uuid::Uuid::new_v4().simple())
}

/// One point of the queue curve: `n` waiters in `procs` processes.
pub struct QueuePoint {
    pub n: usize,
    pub procs: usize,
    pub per_s: f64,
    pub fill_s: f64,
    pub client_kib_per_waiter: f64,
    pub server_mib: f64,
    pub data_mib: f64,
    pub cpu_us_per_handoff: f64,
    pub client_cpu_us_per_handoff: f64,
}

/// A closed loop of `n` fair waiters on one key in `procs` processes,
/// queued behind a holder, then let go.
pub async fn queue_point(server: &Server, n: usize, procs: usize, plan: &Plan) -> Res<QueuePoint> {
    let prefix = unique("queue");
    let config = crate::scale_child::config(server.endpoint(), &prefix)?;
    let locker = config.connect(true).await?;
    let holder = locker.try_lock(&Key::from("q")).await?.ok_or("q busy")?;
    let before = server.queued(&prefix).await?;
    let t = Instant::now();
    let mut children = Vec::new();
    for i in 0..procs {
        let share = n / procs + usize::from(i < n % procs);
        children.push(Proc::start("queue", server.endpoint(), &prefix, share).await?);
    }
    while server.queued(&prefix).await? < before + n {
        for c in &mut children {
            c.check_alive()?;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fill_s = t.elapsed().as_secs_f64();
    eprintln!("scale:   {n} queued in {fill_s:.1} s");
    let grown: f64 = children.iter().map(|c| c.rss() - c.base).sum();
    let (server_mib, data_mib) = (
        server.rss() / 1048576.0,
        server.data_bytes().await? / 1048576.0,
    );
    holder.unlock().await?;
    tokio::time::sleep(plan.warm).await;
    let (c0, cpu0, client0, t0) = (
        total_count(&mut children).await?,
        cpu_secs(server.pid()),
        total_cpu(&children),
        Instant::now(),
    );
    tokio::time::sleep(plan.window).await;
    let c1 = total_count(&mut children).await?;
    let (secs, cpu) = (t0.elapsed().as_secs_f64(), cpu_secs(server.pid()) - cpu0);
    let client_cpu = total_cpu(&children) - client0;
    finish_all(children).await?;
    let handoffs = (c1 - c0).max(1.0);
    eprintln!(
        "scale:   filled in {fill_s:.1} s, {:.0} handoffs/s, {:.1} KiB/waiter",
        handoffs / secs,
        grown / n as f64 / 1024.0
    );
    Ok(QueuePoint {
        n,
        procs,
        per_s: handoffs / secs,
        fill_s,
        client_kib_per_waiter: grown / n as f64 / 1024.0,
        server_mib,
        data_mib,
        cpu_us_per_handoff: cpu * 1e6 / handoffs,
        client_cpu_us_per_handoff: client_cpu * 1e6 / handoffs,
    })
}

/// The queue curve on `server`: one process, and `plan.spread` processes.
pub async fn queue_curve(server: &Server, plan: &Plan) -> Res<Vec<QueuePoint>> {
    let mut points = Vec::new();
    for procs in [1, plan.spread] {
        for &n in &plan.queues {
            eprintln!(
                "scale: {} queue of {n} in {procs} process(es)",
                server.name()
            );
            points.push(queue_point(server, n, procs.min(n), plan).await?);
        }
    }
    Ok(points)
}

pub fn queue_table(server: &Server, points: &[QueuePoint], floor: Option<f64>) -> Table {
    let mut t = Table::new(
        &format!(
            "{}: one fair key, a closed loop of N waiters",
            server.name()
        ),
        &[
            "waiters",
            "processes",
            "handoffs/s",
            "vs 10 waiters",
            "wait (N/rate)",
            "queue filled in",
            "client KiB/waiter",
            "server RSS MiB",
            "data MiB",
            "server CPU us/handoff",
            "client CPU us/handoff",
        ],
    );
    for p in points {
        let ten = points
            .iter()
            .find(|q| q.procs == p.procs.min(10) && q.n == 10)
            .map_or(f64::NAN, |q| q.per_s);
        t.row(vec![
            p.n.to_string(),
            p.procs.to_string(),
            format!("{:.0}", p.per_s),
            format!("{:.2}x", p.per_s / ten),
            format!("{:.2} s", p.n as f64 / p.per_s),
            format!("{:.1} s", p.fill_s),
            format!("{:.1}", p.client_kib_per_waiter),
            format!("{:.0}", p.server_mib),
            format!("{:.1}", p.data_mib),
            format!("{:.0}", p.cpu_us_per_handoff),
            format!("{:.0}", p.client_cpu_us_per_handoff),
        ]);
    }
    if let Some(floor) = floor {
        t.note(&format!(
            "floor: a put seen by a watch (C+P), {floor:.0}/s in this run"
        ));
    }
    t
}

pub fn queue_chart(
    server: &Server,
    points: &[QueuePoint],
    floor: Option<f64>,
    peer: &[(usize, f64)],
) -> Chart {
    let mut series = Vec::new();
    for procs in [1, 10] {
        let line: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.procs == procs.min(p.n))
            .map(|p| (p.n as f64, p.per_s))
            .collect();
        series.push(Series {
            name: format!(
                "fairlock, {procs} process{}",
                if procs > 1 { "es" } else { "" }
            ),
            points: line,
            dashed: false,
        });
    }
    if !peer.is_empty() {
        series.push(Series {
            name: "Go concurrency.Mutex".into(),
            points: peer.iter().map(|&(n, r)| (n as f64, r)).collect(),
            dashed: true,
        });
    }
    if let Some(floor) = floor {
        let xs = points.iter().map(|p| p.n as f64);
        let (lo, hi) = xs.fold((f64::MAX, 0.0f64), |(a, b), x| (a.min(x), b.max(x)));
        series.push(Series {
            name: "floor (C+P)".into(),
            points: vec![(lo, floor), (hi, floor)],
            dashed: true,
        });
    }
    Chart {
        title: format!(
            "{}: handoffs per second against queue length",
            server.name()
        ),
        x_label: "fair waiters on one key".into(),
        y_label: "handoffs per second".into(),
        series,
    }
}

/// The Go peer's handoffs per second with `n` clients on one key, each
/// with its own session, three cycles each (ramp included).
pub async fn go_queue(bin: &str, ep: &str, n: usize) -> Res<f64> {
    let (bin, ep) = (bin.to_owned(), ep.to_owned());
    let run = tokio::task::spawn_blocking(move || {
        crate::go_peer::go_run(&bin, &ep, "contended", n, 3 * n).map(|r| r.ops_per_s)
    });
    run.await?
}
