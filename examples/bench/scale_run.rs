//! The run of `bench --scale`: its own etcd and Redis, the floors the
//! curves are drawn against, the tables and the drawings.

use std::path::Path;
use std::time::Instant;

use etcd_client::PutOptions;
use fairlock::Key;
use fairlock::etcd::{EtcdConfig, EtcdLocker};

use crate::scale::{self, Plan};
use crate::scale_child::in_flight;
use crate::scale_procs::Server;
use crate::support;
use crate::workloads::{self, Res};
use crate::{scale_held, scale_sessions};

/// Runs every curve and writes the drawings into `svg_dir`.
pub async fn run(quick: bool, svg_dir: &Path, go: bool, redis: bool) -> Res<()> {
    let started = Instant::now();
    let plan = Plan::new(quick);
    let etcd = support::Etcd::start_args(&["--quota-backend-bytes", "8589934592"]);
    let server = Server::Etcd {
        endpoint: etcd.endpoint.clone(),
        pid: etcd.pid(),
    };
    eprintln!("scale: etcd {}", server.endpoint());
    std::fs::create_dir_all(svg_dir)?;
    let draw = |name: &str, chart: crate::chart::Chart| -> Res<()> {
        let path = svg_dir.join(name);
        std::fs::write(&path, chart.svg())?;
        eprintln!("scale: drew {}", path.display());
        Ok(())
    };
    let mut out = String::new();

    let floor = 1.0
        / workloads::put_to_event(server.endpoint(), 200)
            .await?
            .mean()
            .as_secs_f64();
    let go_bin = if go {
        crate::go_peer::build_go_peer()
    } else {
        None
    };
    let mut peer = Vec::new();
    if let Some(bin) = &go_bin {
        for &n in plan.queues.iter().filter(|&&n| n <= plan.go_max) {
            eprintln!("scale: Go concurrency.Mutex, {n} clients");
            peer.push((n, scale::go_queue(bin, server.endpoint(), n).await?));
        }
    }
    let queue = scale::queue_curve(&server, &plan).await?;
    out += &scale::queue_table(&server, &queue, Some(floor)).markdown();
    if !peer.is_empty() {
        out +=
            "\nGo `concurrency.Mutex` (each client its own session, 3 cycles each, ramp included):";
        for (n, r) in &peer {
            out += &format!(" {n} clients {r:.0}/s;");
        }
        out += "\n";
    }
    draw(
        "scale-queue-etcd.svg",
        scale::queue_chart(&server, &queue, Some(floor), &peer),
    )?;
    let held = scale_held::held_curve(&server, &plan).await?;
    out += &format!(
        "\n{}",
        scale_held::held_table(&server, &held, &plan).markdown()
    );
    let sessions = scale_sessions::sessions_curve(&server, &plan).await?;
    out += &format!("\n{}", scale_sessions::sessions_table(&sessions).markdown());
    draw(
        "scale-sessions-etcd.svg",
        scale_sessions::sessions_chart(&sessions),
    )?;

    let mut redis_held = None;
    if redis {
        let servers = crate::redis_rows::servers(1).await?;
        let r = Server::Redis {
            url: servers[0].url.clone(),
            pid: servers[0].pid(),
        };
        let queue = scale::queue_curve(&r, &plan).await?;
        out += &format!("\n{}", scale::queue_table(&r, &queue, None).markdown());
        out += "\nNo Redis peer queues fairly (rslock and Redlock retry): no floor or peer line.\n";
        draw(
            "scale-queue-redis.svg",
            scale::queue_chart(&r, &queue, None, &[]),
        )?;
        let held = scale_held::held_curve(&r, &plan).await?;
        out += &format!("\n{}", scale_held::held_table(&r, &held, &plan).markdown());
        redis_held = Some((r, held, servers));
    }
    let mut curves = vec![(&server, held.as_slice())];
    if let Some((r, held, _)) = &redis_held {
        curves.push((r, held.as_slice()));
    }
    draw("scale-held.svg", scale_held::held_chart(&curves))?;
    println!("{out}");
    eprintln!("scale: done in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// `--curve NAME N,..`: one curve at these sizes, on etcd or (`redis`)
/// on Redis, printed.
pub async fn one_curve(quick: bool, name: &str, sizes: &[usize], redis: bool) -> Res<()> {
    let plan = &mut Plan::new(quick);
    let (etcd, redis_servers);
    let server = if redis {
        redis_servers = crate::redis_rows::servers(1).await?;
        Server::Redis {
            url: redis_servers[0].url.clone(),
            pid: redis_servers[0].pid(),
        }
    } else {
        etcd = support::Etcd::start_args(&["--quota-backend-bytes", "8589934592"]);
        Server::Etcd {
            endpoint: etcd.endpoint.clone(),
            pid: etcd.pid(),
        }
    };
    eprintln!("scale: {} {}", server.name(), server.endpoint());
    let table = match name {
        "queue" => {
            plan.queues = sizes.to_vec();
            scale::queue_table(&server, &scale::queue_curve(&server, plan).await?, None)
        }
        "held" => {
            plan.held = sizes.to_vec();
            scale_held::held_table(&server, &scale_held::held_curve(&server, plan).await?, plan)
        }
        "sessions" => {
            plan.sessions = sizes.to_vec();
            scale_sessions::sessions_table(&scale_sessions::sessions_curve(&server, plan).await?)
        }
        other => return Err(format!("--curve {other:?}: use queue, held or sessions").into()),
    };
    println!("{}", table.markdown());
    Ok(())
}

/// Seconds to write `n` plain keys under `prefix`, [`in_flight`] at a
/// time: on etcd puts on one lease, on Redis `SET NX PX`.
pub async fn puts(server: &Server, prefix: &str, n: usize) -> Res<f64> {
    let t = Instant::now();
    let key = |i: usize| format!("{prefix}k{i}");
    match server {
        Server::Etcd { endpoint, .. } => {
            let c = workloads::connect(endpoint).await?;
            // Outlives 100,000 puts on a slow disk (over a minute here).
            let lease = c.clone().lease_grant(3600, None).await?.id();
            let puts = (0..n).map(|i| {
                let (mut c, key) = (c.clone(), key(i));
                async move {
                    let opts = PutOptions::new().with_lease(lease);
                    c.put(key, "x", Some(opts)).await.map(drop)
                }
            });
            in_flight(puts).await?;
            let secs = t.elapsed().as_secs_f64();
            c.clone().lease_revoke(lease).await?;
            Ok(secs)
        }
        Server::Redis { url, .. } => {
            let c = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            let sets = (0..n).map(|i| {
                let (mut c, key) = (c.clone(), key(i));
                async move {
                    redis::cmd("SET")
                        .arg(key)
                        .arg("x")
                        .arg("NX")
                        .arg("PX")
                        .arg(3_600_000)
                        .query_async::<Option<String>>(&mut c)
                        .await
                        .map(drop)
                }
            });
            in_flight(sets).await?;
            Ok(t.elapsed().as_secs_f64())
        }
    }
}

/// The uncontended fairlock cycle and the txn floor cycle, interleaved in
/// batches, in microseconds (medians of the batches).
pub async fn cycle_beside(endpoint: &str, prefix: &str) -> Res<(f64, f64)> {
    let c = workloads::connect(endpoint).await?;
    let lease = c.clone().lease_grant(60, None).await?.id();
    let config = EtcdConfig::new([endpoint]).with_prefix(prefix);
    let locker = EtcdLocker::connect(config, true).await?;
    let key = Key::from("uncontended");
    workloads::cycle(&locker, &key, 10).await?;
    let floor_key = format!("{prefix}floor");
    let (mut ours, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let f = workloads::txn_cycle(&c, lease, &floor_key, 40).await?;
        floor.push(f.mean().as_secs_f64() * 1e6);
        let o = workloads::cycle(&locker, &key, 40).await?;
        ours.push(o.mean().as_secs_f64() * 1e6);
    }
    locker.close().await?;
    c.clone().lease_revoke(lease).await?;
    Ok((crate::report::median(ours), crate::report::median(floor)))
}
