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

mod args;
mod chart;
mod cost;
mod cost_rows;
mod etcd_rows;
mod go_peer;
mod latency;
mod memory_rows;
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

use std::process::ExitCode;
use std::time::Duration;

use args::{Opts, parse};
use cost_rows::{print_summary, soak_rows};
use go_peer::build_go_peer;
use report::print;
use server::Metrics;
use workloads::Res;

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
        rt.block_on(memory_rows::rss_child(
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
    let mut summary = Vec::new();
    let mut rows = etcd_rows::rows(o, &ep, etcd_pid, go_peer.as_deref(), &mut summary).await?;

    // 7. memory per held / waiting lock, each in a fresh process
    eprintln!("bench: 7. memory per held / waiting lock, each in a fresh process");
    if delayed.is_none() {
        rows.extend(memory_rows::rows(o.quick, &ep)?);
    }

    // 8. Redis, on its own servers
    if o.redis {
        let dur = Duration::from_millis(if o.quick { 1500 } else { 4000 });
        rows.extend(redis_rows::rows(o.quick, dur).await?);
    }

    print(&rows, o.json);
    print_summary(&summary, o.json);
    Ok(())
}
