//! The etcd rows of the default run: the floors, the uncontended cycle
//! against the txn floor, one contended key, many keys, the Go peer, what a
//! lock costs etcd, the soak, read/write locks, several keys, and a release
//! with waiters queued.

use std::time::Duration;

use fairlock::{Context, Key, Locker};

use crate::args::Opts;
use crate::cost;
use crate::cost_rows::{cost_rows, soak_rows};
use crate::go_peer::go_run;
use crate::report::{Row, median, ops_of};
use crate::server::Metrics;
use crate::workloads::{self, Res, Run};
use crate::{multi_rows, shared_rows};

/// The rows, against etcd `ep` (its process `etcd_pid` when the bench
/// started it) and the Go peer `go_peer` if built; lines for the summary
/// go to `summary`.
pub async fn rows(
    o: &Opts,
    ep: &str,
    etcd_pid: Option<u32>,
    go_peer: Option<&str>,
    summary: &mut Vec<String>,
) -> Res<Vec<Row>> {
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
    let c = workloads::put(ep, seq_n).await?;
    let r = workloads::get(ep, seq_n).await?;
    let cp = workloads::put_to_event(ep, seq_n).await?;
    rows.push(Row::of("floor: put (C)", "-", 1, 1, &c));
    rows.push(Row::of("floor: linearizable get (R)", "-", 1, 1, &r));
    rows.push(Row::of("floor: put -> watch event (C+P)", "-", 1, 1, &cp));
    let (c_s, cp_s) = (c.mean().as_secs_f64(), cp.mean().as_secs_f64());
    let fair_floor = 1.0 / cp_s; // handoffs/s at one write + one push
    let unfair_floor = 1.0 / (2.0 * c_s);

    // 2. uncontended cycle, interleaved batches against the txn floor
    eprintln!("bench: 2. uncontended cycle, interleaved batches against the txn floor");
    let client = workloads::connect(ep).await?;
    // Outlives the interleaved batches (a minute or more with --latency-ms);
    // revoked after them.
    let lease = client.clone().lease_grant(3600, None).await?.id();
    let floor_key = format!("/bench/floor-{}", uuid::Uuid::new_v4().simple());
    let pre = format!("/bench/unc-{}/", uuid::Uuid::new_v4().simple());
    let (fair_l, unfair_l) = (
        workloads::locker(ep, &pre, true).await?,
        workloads::locker(ep, &pre, false).await?,
    );
    let (kf, ku) = (Key::from("fair"), Key::from("unfair"));
    workloads::cycle(&fair_l, &kf, 10).await?; // session lease + watches
    workloads::cycle(&unfair_l, &ku, 10).await?;
    let (mut floor_m, mut fair_m, mut unfair_m) = (Vec::new(), Vec::new(), Vec::new());
    let (mut floor_all, mut fair_all, mut unfair_all) = (Vec::new(), Vec::new(), Vec::new());
    let m0 = Metrics::scrape(ep)?;
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
    let m1 = Metrics::scrape(ep)?;
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
            let meter = cost::Meter::start(&cpu, ep)?;
            let run = workloads::fairlock_clients(ep, fair, n, dur, false).await?;
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
        let meter = cost::Meter::start(&cpu, ep)?;
        let run = workloads::v3lock_clients(ep, n, dur).await?;
        let row = Row::of("peer: etcd v3lock contended, 1 key", "fair", n, 1, &run);
        rows.push(meter.finish(row, run.ops())?);
    }
    let v3_unc = workloads::v3lock_clients(ep, 1, dur).await?;
    rows.push(Row::of(
        "peer: etcd v3lock uncontended",
        "fair",
        1,
        1,
        &v3_unc,
    ));

    // 4. many keys
    eprintln!("bench: 4. many keys");
    let puts = workloads::puts_concurrent(ep, 32, dur).await?;
    rows.push(Row::of("floor: raw puts, 32 clients", "-", 32, 32, &puts));
    let txns = workloads::txn_cycles_concurrent(ep, 32, dur).await?;
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
        let run = workloads::fairlock_clients(ep, fair, 32, dur, true).await?;
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
        let go = go_run(bin, ep, "uncontended", 1, if o.quick { 200 } else { 1000 })?;
        rows.push(go.named("peer: Go concurrency.Mutex uncontended", 1));
        for &n in counts {
            let meter = cost::Meter::start(&cpu, ep)?;
            let go = go_run(bin, ep, "contended", n, n_for(n))?;
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
        let go = go_run(bin, ep, "keys", 32, if o.quick { 640 } else { 3200 })?;
        rows.push(go.named("peer: Go concurrency.Mutex 32 clients on 32 keys", 32));
    }

    // 5b. what a lock costs etcd, and the ring floor
    eprintln!("bench: 5b. what a lock costs etcd, and the ring floor");
    let fair_at = |clients| ops_of(&rows, "fairlock contended, 1 key", "fair", clients);
    let fair_handoffs = [(4, fair_at(4)), (16, fair_at(16))];
    let go = go_peer;
    rows.extend(cost_rows(o.quick, ep, etcd_pid, go, dur, &fair_handoffs, summary).await?);
    rows.extend(soak_rows(o.soak(), ep, etcd_pid, go, summary).await?);
    rows.extend(shared_rows::rows(ep, o.quick, summary).await?);
    rows.extend(multi_rows::rows(ep, o.quick, o.go, summary).await?);

    // 6. cost of a release with 100 queued waiters
    eprintln!("bench: 6. cost of a release with 100 queued waiters");
    rows.push(release_with_waiters(ep, 100, 20).await?);
    Ok(rows)
}

/// Holds a key, queues `waiters` fair waiters (each its own locker on one
/// shared connection), then lets `releases` handoffs happen and counts what
/// etcd saw per release.
pub async fn release_with_waiters(ep: &str, waiters: usize, releases: usize) -> Res<Row> {
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
