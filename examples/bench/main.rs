//! fairlock's benchmark: the floors, fairlock, and the peers, in ONE run
//! against the same etcd, reported as ratios.
//!
//! ```text
//! cargo run --release --example bench -- [--endpoints E] [--quick] [--json] [--no-go]
//!     [--no-redis] [--redis-only] [--redis-cycle] [--redis-deployments] [--shared-only]
//!     [--multi-only] [--multi-deadlock]
//! ```
//! Without `--endpoints` it starts its own single-member etcd (from PATH or
//! `ETCD_BIN`), with its data on disk. The Go peer (etcd's own
//! `concurrency.Mutex`, `go-peer/`) is built with `scripts/build-go-peer.sh`
//! (or taken from `FAIRLOCK_GO_PEER`); `--no-go` skips it. `cost.rs` adds
//! etcd CPU and proposals per cycle on many keys, the raw-etcd token ring
//! (the fair handoff floor) and a soak without compaction (`--soak-secs N`,
//! default 600, 60 with `--quick`; `--soak-only` runs just the soak).
//! `--trace` runs only the uncontended cycle without, then with, a tracing
//! subscriber installed (`trace.rs`).
//! The Redis rows (`redis_rows.rs`) start their own redis-servers (one, and
//! five for Redlock) and include the `rslock` crate as the peer;
//! `--no-redis` skips them, `--redis-only` runs only them, `--redis-cycle`
//! only the uncontended cycle against the floor and rslock, interleaved
//! (`redis_cycle.rs`), `--redis-deployments` only the same on a Redis
//! Cluster and behind sentinels, with a failover of each
//! (`redis_deployments.rs`).
//! `shared_rows.rs` adds read/write locks and semaphores on one key against
//! etcd's Go `recipe.RWMutex`; `--shared-only` runs only them.
//! `multi_rows.rs` adds `lock_all` on 2 of 8 keys against sorted
//! one-by-one `lock` and etcd's Go `concurrency.Mutex` one by one
//! (`--no-go` skips that peer); `--multi-only` runs only them.
//! `--multi-deadlock` runs only `multi_deadlock.rs`: how often locking
//! `[a, b]` and `[b, a]` one by one deadlocks, against `lock_all`.
//! `--scale` runs only the scale curves (`scale.rs`): 10 to 10,000 waiters
//! on a key, 1 to 100,000 held keys, idle locker processes; on etcd and
//! Redis, drawn as SVGs into `--svg-dir D` (default `target/scale`).

mod chart;
mod cost;
mod cost_rows;
mod go_peer;
mod latency;
mod multi_deadlock;
mod multi_rows;
mod redis_cycle;
mod redis_deployments;
mod redis_hand;
mod redis_rows;
mod report;
mod scale;
mod scale_child;
mod scale_held;
mod scale_procs;
mod scale_run;
mod scale_sessions;
mod scale_table;
mod server;
mod shared_rows;
#[path = "../../tests/support/mod.rs"]
mod support;
mod trace;
mod workloads;

use std::process::{Command, ExitCode};
use std::time::Duration;

use cost_rows::{cost_rows, print_summary, soak_rows};
use fairlock::{Context, Key, Locker};
use go_peer::{build_go_peer, go_run};
use report::{Row, median, ops_of, print};
use server::Metrics;
use workloads::{Res, Run};

struct Opts {
    endpoints: Option<String>,
    quick: bool,
    json: bool,
    go: bool,
    redis: bool,
    redis_only: bool,
    redis_cycle: bool,
    /// `--redis-deployments`: the cluster and sentinel rows only.
    redis_deployments: bool,
    soak_only: bool,
    shared_only: bool,
    /// `--multi-only`: the several-keys rows only.
    multi_only: bool,
    /// `--multi-deadlock`: the deadlock demonstration only.
    multi_deadlock: bool,
    soak_secs: Option<u64>,
    /// Which fairlock modes the soak runs.
    soak_modes: Vec<bool>,
    /// `--trace`: the uncontended cycle without and with a subscriber.
    trace: bool,
    /// `--latency-ms D`: the etcd rows on a 3-member cluster with D ms on
    /// every link.
    latency: Option<Duration>,
    rss_child: Option<(String, usize)>,
    /// `--scale`: the scale curves only.
    scale: bool,
    /// `--curve queue|held|sessions [N,..]`: one scale curve, at these
    /// sizes.
    curve: Option<(String, Vec<usize>)>,
    /// `--svg-dir D`: where `--scale` draws.
    svg_dir: std::path::PathBuf,
    /// `--scale-child MODE ENDPOINT PREFIX N`: one process of a curve.
    scale_child: Option<(String, String, String, usize)>,
}

impl Opts {
    /// The soak's length (0: none) and the fairlock modes it runs.
    fn soak(&self) -> (u64, &[bool]) {
        let secs = self.soak_secs.unwrap_or(if self.quick { 60 } else { 600 });
        (secs, &self.soak_modes)
    }
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        endpoints: None,
        quick: false,
        json: false,
        go: true,
        redis: true,
        redis_only: false,
        redis_cycle: false,
        redis_deployments: false,
        soak_only: false,
        shared_only: false,
        multi_only: false,
        multi_deadlock: false,
        soak_secs: None,
        soak_modes: vec![true, false],
        trace: false,
        latency: None,
        rss_child: None,
        scale: false,
        svg_dir: "target/scale".into(),
        curve: None,
        scale_child: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--endpoints" => o.endpoints = Some(args.next().ok_or("--endpoints needs a value")?),
            "--quick" => o.quick = true,
            "--json" => o.json = true,
            "--no-go" => o.go = false,
            "--no-redis" => o.redis = false,
            "--trace" => o.trace = true,
            "--redis-only" => o.redis_only = true,
            "--redis-cycle" => o.redis_cycle = true,
            "--redis-deployments" => o.redis_deployments = true,
            "--soak-only" => o.soak_only = true,
            "--shared-only" => o.shared_only = true,
            "--multi-only" => o.multi_only = true,
            "--multi-deadlock" => o.multi_deadlock = true,
            "--scale" => o.scale = true,
            "--curve" => {
                let name = args.next().ok_or("--curve needs queue, held or sessions")?;
                let sizes = args.next().unwrap_or_default();
                let sizes = sizes.split(',').filter_map(|n| n.parse().ok()).collect();
                o.scale = true;
                o.curve = Some((name, sizes));
            }
            "--svg-dir" => o.svg_dir = args.next().ok_or("--svg-dir needs a directory")?.into(),
            "--scale-child" => {
                let mut next = || args.next().ok_or("--scale-child MODE ENDPOINT PREFIX N");
                let (mode, ep, prefix) = (next()?, next()?, next()?);
                let n = next()?.parse().map_err(|_| "--scale-child: N is a count")?;
                o.scale_child = Some((mode, ep, prefix, n));
            }
            "--latency-ms" => {
                let v = args
                    .next()
                    .ok_or("--latency-ms needs a delay in milliseconds")?;
                let ms: f64 = v
                    .parse()
                    .ok()
                    .filter(|ms: &f64| ms.is_finite() && *ms >= 0.0 && *ms <= 1000.0)
                    .ok_or(format!("--latency-ms {v:?}: give milliseconds, 0 to 1000"))?;
                o.latency = Some(Duration::from_secs_f64(ms / 1000.0));
                // Round trips are the point: no Redis, soak or memory rows.
                o.redis = false;
                o.soak_secs = Some(0);
            }
            "--soak-mode" => {
                o.soak_modes = match args.next().as_deref() {
                    Some("fair") => vec![true],
                    Some("unfair") => vec![false],
                    Some("both") => vec![true, false],
                    other => {
                        return Err(format!("--soak-mode {other:?}: use fair, unfair or both"));
                    }
                };
            }
            "--soak-secs" => {
                let v = args.next().ok_or("--soak-secs needs a number of seconds")?;
                o.soak_secs = Some(
                    v.parse()
                        .map_err(|_| format!("--soak-secs {v:?}: not a number"))?,
                );
            }
            "--rss-child" => {
                let what = args.next().ok_or("--rss-child needs held|waiting")?;
                let n = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--rss-child needs a count")?;
                o.rss_child = Some((what, n));
            }
            "-h" | "--help" => {
                return Err("usage: bench [--endpoints E] [--quick] [--json] [--no-go] \
                            [--no-redis] [--redis-only] [--redis-cycle] [--redis-deployments] \
                            [--shared-only] [--multi-only] [--multi-deadlock] \
                            [--scale [--svg-dir D]] [--curve queue|held|sessions N,.. [--redis-only]] \
                            [--soak-only] [--soak-secs N] \
                            [--soak-mode fair|unfair|both] [--trace] [--latency-ms D]"
                    .into());
            }
            other => return Err(format!("unknown argument {other:?}; see --help")),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    let opts = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Some((mode, ep, prefix, n)) = &opts.scale_child {
        // Why a child failed (a lost lease, say) goes to its stderr.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("fairlock=warn"))
            .with_writer(std::io::stderr)
            .try_init();
        // An idle one on one thread: a thousand of these run side by side.
        // The others as a service would run: two workers (a burst of 10,000
        // Redis lock calls on one thread starves the connection's reader
        // past the 250 ms node timeout).
        let rt = match mode.as_str() {
            "idle" => tokio::runtime::Builder::new_current_thread(),
            _ => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(2);
                b
            }
        }
        .enable_all()
        .build()
        .expect("runtime");
        return match rt.block_on(scale_child::run(mode, ep, prefix, *n)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench --scale-child: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let result = if let Some((what, n)) = &opts.rss_child {
        rt.block_on(rss_child(
            opts.endpoints.as_deref().unwrap_or_default(),
            what,
            *n,
        ))
    } else {
        rt.block_on(run(&opts))
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(o: &Opts) -> Res<()> {
    if o.scale {
        if let Some((name, sizes)) = &o.curve {
            return scale_run::one_curve(o.quick, name, sizes, o.redis_only).await;
        }
        return scale_run::run(o.quick, &o.svg_dir, o.go, o.redis).await;
    }
    if o.redis_cycle {
        print(&redis_rows::cycle_rows(o.quick).await?, o.json);
        return Ok(());
    }
    if o.redis_deployments {
        print(&redis_deployments::rows(o.quick).await?, o.json);
        return Ok(());
    }
    if o.redis_only {
        let dur = Duration::from_millis(if o.quick { 1500 } else { 4000 });
        print(&redis_rows::rows(o.quick, dur).await?, o.json);
        return Ok(());
    }
    let mut delayed = None;
    let (own, ep) = match (&o.endpoints, o.latency) {
        (Some(e), _) => (None, e.split(',').next().unwrap_or_default().to_string()),
        (None, Some(delay)) => {
            let cluster = latency::start(3, delay).await?;
            let ep = cluster.leader.clone();
            eprintln!(
                "bench: 3 members, {:.2} ms on every client and peer link; clients use the leader",
                delay.as_secs_f64() * 1000.0
            );
            delayed = Some(cluster);
            (None, ep)
        }
        (None, None) => {
            // Data on disk, removed at exit. etcd's largest suggested space
            // quota (8 GiB, the default is 2): a long soak writes versions
            // faster than the default holds (about 22 minutes of the fair
            // soak on 2026-11-23), and nothing compacts during one.
            let etcd = support::Etcd::start_args(&["--quota-backend-bytes", "8589934592"]);
            let ep = etcd.endpoint.clone();
            (Some(etcd), ep)
        }
    };
    let version = Metrics::scrape(&ep).ok();
    eprintln!(
        "bench: etcd {ep}, version {}",
        version
            .as_ref()
            .and_then(Metrics::version)
            .unwrap_or("unknown")
    );
    if o.trace {
        print(&trace::rows(&ep, o.quick).await?, o.json);
        return Ok(());
    }
    if o.shared_only {
        let mut summary = Vec::new();
        print(
            &shared_rows::rows(&ep, o.quick, &mut summary).await?,
            o.json,
        );
        print_summary(&summary, o.json);
        return Ok(());
    }
    if o.multi_only || o.multi_deadlock {
        let mut summary = Vec::new();
        let rows = if o.multi_deadlock {
            multi_deadlock::rows(&ep, o.quick, &mut summary).await?
        } else {
            multi_rows::rows(&ep, o.quick, o.go, &mut summary).await?
        };
        print(&rows, o.json);
        print_summary(&summary, o.json);
        return Ok(());
    }
    let etcd_pid = own.as_ref().map(support::Etcd::pid);
    let go_peer = if o.go { build_go_peer() } else { None };
    if o.soak_only {
        let mut summary = Vec::new();
        let rows = soak_rows(o.soak(), &ep, etcd_pid, go_peer.as_deref(), &mut summary).await?;
        print(&rows, o.json);
        print_summary(&summary, o.json);
        return Ok(());
    }
    let (seq_n, batches, batch_n) = if o.quick {
        (200, 4, 50)
    } else {
        (1000, 10, 200)
    };
    let dur = Duration::from_millis(if o.quick { 1500 } else { 4000 });
    let counts: &[usize] = &[2, 4, 16, 64];
    let mut rows = Vec::new();
    eprintln!(
        "bench: etcd {ep}; {} run",
        if o.quick { "quick" } else { "full" }
    );

    // 1. floors
    eprintln!("bench: 1. floors");
    let c = workloads::put(&ep, seq_n).await?;
    let r = workloads::get(&ep, seq_n).await?;
    let cp = workloads::put_to_event(&ep, seq_n).await?;
    rows.push(Row::of("floor: put (C)", "-", 1, 1, &c));
    rows.push(Row::of("floor: linearizable get (R)", "-", 1, 1, &r));
    rows.push(Row::of("floor: put -> watch event (C+P)", "-", 1, 1, &cp));
    let (c_s, cp_s) = (c.mean().as_secs_f64(), cp.mean().as_secs_f64());
    let fair_floor = 1.0 / cp_s; // handoffs/s at one write + one push
    let unfair_floor = 1.0 / (2.0 * c_s);

    // 2. uncontended cycle, interleaved batches against the txn floor
    eprintln!("bench: 2. uncontended cycle, interleaved batches against the txn floor");
    let client = workloads::connect(&ep).await?;
    // Outlives the interleaved batches (a minute or more with --latency-ms);
    // revoked after them.
    let lease = client.clone().lease_grant(3600, None).await?.id();
    let floor_key = format!("/bench/floor-{}", uuid::Uuid::new_v4().simple());
    let pre = format!("/bench/unc-{}/", uuid::Uuid::new_v4().simple());
    let (fair_l, unfair_l) = (
        workloads::locker(&ep, &pre, true).await?,
        workloads::locker(&ep, &pre, false).await?,
    );
    let (kf, ku) = (Key::from("fair"), Key::from("unfair"));
    workloads::cycle(&fair_l, &kf, 10).await?; // session lease + watches
    workloads::cycle(&unfair_l, &ku, 10).await?;
    let (mut floor_m, mut fair_m, mut unfair_m) = (Vec::new(), Vec::new(), Vec::new());
    let (mut floor_all, mut fair_all, mut unfair_all) = (Vec::new(), Vec::new(), Vec::new());
    let m0 = Metrics::scrape(&ep)?;
    for _ in 0..batches {
        let f = workloads::txn_cycle(&client, lease, &floor_key, batch_n).await?;
        let a = workloads::cycle(&fair_l, &kf, batch_n).await?;
        let u = workloads::cycle(&unfair_l, &ku, batch_n).await?;
        floor_m.push(f.mean().as_secs_f64());
        fair_m.push(a.mean().as_secs_f64());
        unfair_m.push(u.mean().as_secs_f64());
        floor_all.push(f);
        fair_all.push(a);
        unfair_all.push(u);
    }
    let m1 = Metrics::scrape(&ep)?;
    let merge = |v: Vec<Run>| Run {
        elapsed: v.iter().map(|r| r.elapsed).sum(),
        lat: v.into_iter().flat_map(|r| r.lat).collect(),
    };
    let floor_cycle = median(floor_m);
    let (floor_run, fair_run, unfair_run) = (merge(floor_all), merge(fair_all), merge(unfair_all));
    let ops3 = floor_run.ops() + fair_run.ops() + unfair_run.ops();
    rows.push(Row::of(
        "floor: txn create + compare-delete cycle",
        "-",
        1,
        1,
        &floor_run,
    ));
    rows.push(
        Row::of("fairlock uncontended lock+unlock", "fair", 1, 1, &fair_run).ratio(
            median(fair_m) / floor_cycle,
            "x floor cycle (median of batch means)",
        ),
    );
    rows.push(
        Row::of(
            "fairlock uncontended lock+unlock",
            "unfair",
            1,
            1,
            &unfair_run,
        )
        .ratio(
            median(unfair_m) / floor_cycle,
            "x floor cycle (median of batch means)",
        )
        .cost(&m0, &m1, ops3), // all three kinds: 2 writes each
    );
    fair_l.close().await?;
    unfair_l.close().await?;
    client.clone().lease_revoke(lease).await?;

    // 3. one contended key
    eprintln!("bench: 3. one contended key");
    let cpu = cost::EtcdCpu::new(etcd_pid);
    for &n in counts {
        for fair in [true, false] {
            let meter = cost::Meter::start(&cpu, &ep)?;
            let run = workloads::fairlock_clients(&ep, fair, n, dur, false).await?;
            let row = Row::of(
                "fairlock contended, 1 key",
                if fair { "fair" } else { "unfair" },
                n,
                1,
                &run,
            );
            let row = meter.finish(row, run.ops())?;
            rows.push(if fair {
                row.ratio(run.per_s() / fair_floor, "x 1/(C+P)")
            } else {
                row.ratio(run.per_s() / unfair_floor, "x 1/(2C)")
            });
        }
        let meter = cost::Meter::start(&cpu, &ep)?;
        let run = workloads::v3lock_clients(&ep, n, dur).await?;
        let row = Row::of("peer: etcd v3lock contended, 1 key", "fair", n, 1, &run);
        rows.push(meter.finish(row, run.ops())?);
    }
    let v3_unc = workloads::v3lock_clients(&ep, 1, dur).await?;
    rows.push(Row::of(
        "peer: etcd v3lock uncontended",
        "fair",
        1,
        1,
        &v3_unc,
    ));

    // 4. many keys
    eprintln!("bench: 4. many keys");
    let puts = workloads::puts_concurrent(&ep, 32, dur).await?;
    rows.push(Row::of("floor: raw puts, 32 clients", "-", 32, 32, &puts));
    let txns = workloads::txn_cycles_concurrent(&ep, 32, dur).await?;
    rows.push(
        Row::of(
            "floor: txn create + compare-delete, 32 clients on 32 keys",
            "-",
            32,
            32,
            &txns,
        )
        .ratio(txns.per_s() / puts.per_s(), "x raw puts/s at 32"),
    );
    for fair in [true, false] {
        let run = workloads::fairlock_clients(&ep, fair, 32, dur, true).await?;
        rows.push(
            Row::of(
                "fairlock 32 clients on 32 keys",
                if fair { "fair" } else { "unfair" },
                32,
                32,
                &run,
            )
            .ratio(run.per_s() / puts.per_s(), "x raw puts/s at 32"),
        );
    }

    // 5. the Go peer
    eprintln!("bench: 5. the Go peer");
    if let Some(bin) = &go_peer {
        let n_for = |clients: usize| {
            if o.quick {
                100.max(clients * 2)
            } else {
                400.max(clients * 6)
            }
        };
        let go = go_run(bin, &ep, "uncontended", 1, if o.quick { 200 } else { 1000 })?;
        rows.push(go.named("peer: Go concurrency.Mutex uncontended", 1));
        for &n in counts {
            let meter = cost::Meter::start(&cpu, &ep)?;
            let go = go_run(bin, &ep, "contended", n, n_for(n))?;
            let ours = rows
                .iter()
                .find(|r| {
                    r.name == "fairlock contended, 1 key" && r.mode == "fair" && r.clients == n
                })
                .map_or(0.0, |r| r.ops_per_s);
            let ratio = ours / go.ops_per_s.max(1e-9);
            let row = go.named("peer: Go concurrency.Mutex contended, 1 key", n);
            rows.push(meter.finish(row, go.ops)?);
            let last = rows.len() - 1;
            rows[last].ratio = Some(ratio);
            rows[last].ratio_of = "fairlock fair / this";
        }
        let go = go_run(bin, &ep, "keys", 32, if o.quick { 640 } else { 3200 })?;
        rows.push(go.named("peer: Go concurrency.Mutex 32 clients on 32 keys", 32));
    }

    // 5b. what a lock costs etcd, and the ring floor
    eprintln!("bench: 5b. what a lock costs etcd, and the ring floor");
    let mut summary = Vec::new();
    let fair_at = |clients| ops_of(&rows, "fairlock contended, 1 key", "fair", clients);
    let fair_handoffs = [(4, fair_at(4)), (16, fair_at(16))];
    let go = go_peer.as_deref();
    rows.extend(
        cost_rows(
            o.quick,
            &ep,
            etcd_pid,
            go,
            dur,
            &fair_handoffs,
            &mut summary,
        )
        .await?,
    );
    rows.extend(soak_rows(o.soak(), &ep, etcd_pid, go, &mut summary).await?);
    rows.extend(shared_rows::rows(&ep, o.quick, &mut summary).await?);
    rows.extend(multi_rows::rows(&ep, o.quick, o.go, &mut summary).await?);

    // 6. cost of a release with 100 queued waiters
    eprintln!("bench: 6. cost of a release with 100 queued waiters");
    rows.push(release_with_waiters(&ep, 100, 20).await?);

    // 7. memory per held / waiting lock, each in a fresh process
    eprintln!("bench: 7. memory per held / waiting lock, each in a fresh process");
    let memory: &[&str] = if delayed.is_some() {
        &[]
    } else {
        &["held", "waiting"]
    };
    for &what in memory {
        let n = if o.quick { 2000 } else { 10_000 };
        let out = Command::new(std::env::current_exe()?)
            .args(["--rss-child", what, &n.to_string(), "--endpoints", &ep])
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let bytes = text
            .lines()
            .find_map(|l| l.strip_prefix("RSS_PER_LOCK "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|_| out.status.success());
        let Some(bytes) = bytes else {
            let why = String::from_utf8_lossy(&out.stderr);
            eprintln!("bench: RSS per {what} lock not measured: {}", why.trim());
            continue;
        };
        let mut row = Row::of(
            &format!("RSS per {what} lock, {n} locks in one process"),
            "fair",
            1,
            n,
            &Run {
                lat: Vec::new(),
                elapsed: Duration::from_secs(1),
            },
        );
        row.ops = n;
        row.ops_per_s = 0.0;
        rows.push(row.ratio(bytes / 1024.0, "KiB per lock"));
    }

    // 8. Redis, on its own servers
    if o.redis {
        rows.extend(redis_rows::rows(o.quick, dur).await?);
    }

    print(&rows, o.json);
    print_summary(&summary, o.json);
    Ok(())
}

/// Holds a key, queues `waiters` fair waiters (each its own locker on one
/// shared connection), then lets `releases` handoffs happen and counts what
/// etcd saw per release.
async fn release_with_waiters(ep: &str, waiters: usize, releases: usize) -> Res<Row> {
    let prefix = format!("/bench/herd-{}/", uuid::Uuid::new_v4().simple());
    let client = workloads::connect(ep).await?;
    let config = fairlock::etcd::EtcdConfig::new([ep]).with_prefix(prefix.clone());
    let key = Key::from("k");
    let holder = fairlock::etcd::EtcdLocker::from_client(client.clone(), config.clone(), true);
    let first = holder.try_lock(&key).await?.ok_or("key busy")?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (go_tx, _) = tokio::sync::broadcast::channel::<usize>(waiters + 1);
    let mut tasks = Vec::new();
    let mut lockers = Vec::new();
    for i in 0..waiters {
        let l = fairlock::etcd::EtcdLocker::from_client(client.clone(), config.clone(), true);
        lockers.push(l.clone());
        let (key, tx, mut go) = (key.clone(), tx.clone(), go_tx.subscribe());
        tasks.push(tokio::spawn(async move {
            let g = l.lock(&Context::background(), &key).await?;
            let _ = tx.send(i);
            // Hold until told, so each handoff is counted alone.
            while go.recv().await.is_ok_and(|n| n != i) {}
            g.unlock().await?;
            Ok::<_, fairlock::Error>(())
        }));
        // Queue them in order: wait until this one's entry exists.
        let queue = format!("{prefix}k/_OWNERS_/");
        loop {
            if workloads::count(&client, &queue).await? > i {
                break;
            }
            tokio::task::yield_now().await;
        }
    }
    let m0 = Metrics::scrape(ep)?;
    let t0 = std::time::Instant::now();
    first.unlock().await?;
    let mut lat = Vec::new();
    for _ in 0..releases {
        let t = std::time::Instant::now();
        let granted = rx.recv().await.ok_or("waiter died")?;
        lat.push(t.elapsed());
        let _ = go_tx.send(granted);
    }
    // The last grant's successor lookup belongs to the measured releases.
    let m1 = Metrics::scrape(ep)?;
    let elapsed = t0.elapsed();
    for l in lockers {
        l.close().await?;
    }
    holder.close().await?;
    for t in tasks {
        t.abort();
    }
    let run = Run { lat, elapsed };
    Ok(Row::of(
        &format!("release with {waiters} fair waiters queued"),
        "fair",
        waiters,
        1,
        &run,
    )
    .cost(&m0, &m1, releases))
}

fn rss_bytes() -> f64 {
    scale_child::rss_bytes(std::process::id())
}

/// In a fresh process: RSS growth per held or per waiting lock.
async fn rss_child(ep: &str, what: &str, n: usize) -> Res<()> {
    let prefix = format!("/bench/rss-{}/", uuid::Uuid::new_v4().simple());
    // Queueing thousands of waiters keeps etcd busy for seconds; a longer
    // TTL keeps the session's renewals from timing out meanwhile.
    let config = fairlock::etcd::EtcdConfig::new([ep])
        .with_prefix(prefix.clone())
        .with_ttl(Duration::from_secs(60));
    let l = fairlock::etcd::EtcdLocker::connect(config.clone(), true).await?;
    let other = fairlock::etcd::EtcdLocker::connect(config, true).await?;
    workloads::cycle(&l, &Key::from("warm"), 20).await?;
    let key = Key::from("contended");
    let held = other.try_lock(&key).await?.ok_or("busy")?;
    let before = rss_bytes();
    let mut guards = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    if what == "held" {
        for chunk in (0..n).collect::<Vec<_>>().chunks(256) {
            let mut set = tokio::task::JoinSet::new();
            for &i in chunk {
                let l = l.clone();
                set.spawn(async move { l.try_lock(&Key::from(format!("k{i}"))).await });
            }
            while let Some(g) = set.join_next().await {
                guards.push(g??.ok_or("key busy")?);
            }
        }
    } else {
        // Queue in batches, so that no enqueue waits behind thousands of
        // others past the request timeout.
        let c = workloads::connect(ep).await?;
        let queue = format!("{prefix}contended/_OWNERS_/");
        let mut queued = 0;
        while queued < n {
            let batch = 200.min(n - queued);
            for _ in 0..batch {
                let (l, key) = (l.clone(), key.clone());
                tasks.spawn(async move { l.lock(&Context::background(), &key).await });
            }
            queued += batch;
            loop {
                if workloads::count(&c, &queue).await? >= queued {
                    break;
                }
                if let Some(done) = tasks.try_join_next() {
                    return Err(format!("a waiter ended early: {:?}", done?.err()).into());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    if what == "waiting" {
        // A waiter that has waited a while (a tenth of the TTL, at most a
        // second) also watches its predecessor: measure that steady state.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let after = rss_bytes();
    println!("RSS_PER_LOCK {:.0}", (after - before) / n as f64);
    tasks.abort_all();
    std::mem::forget(guards); // the lease revoke below frees them all at once
    // Revoking a lease with thousands of keys can outlast the request
    // timeout; the measurement is done, and the leases expire regardless.
    let _ = l.close().await;
    drop(held);
    let _ = other.close().await;
    Ok(())
}
