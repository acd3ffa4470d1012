//! The Redis part of the network suite: one redis-server and the Redis
//! workers (`redis_worker.rs`) each in a namespace; the lock holder cut off
//! from the server past its TTL, then healed. Redis has no history to
//! replay, so the checks are the ones that do not need one:
//! - the counter: acknowledged increments <= counter <= acknowledged +
//!   indeterminate ones (checker 1);
//! - critical sections never overlap: none is excused (checker 2), and
//!   the cut holder is told of the loss before anyone else is granted
//!   (`net_check.rs`);
//! - the lock is granted again within the bound (checker 4);
//! - no lock keys are left once the workers stop (checker 5).

use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use crate::check::{self, Input, Report, Violation};
use crate::events::{Kind, Shared};
use crate::fault::{Fault, Injection, PAST_TTL};
use crate::support::net::Net;
use crate::{BoxError, Opts, mono_ns, redis_worker};

/// Runs one phase per mode; prints the table; returns the violations.
pub async fn run(o: &Opts) -> Result<usize, BoxError> {
    if let Some(why) = Net::unavailable() {
        println!("Redis network fault suite SKIPPED: {why}");
        return Ok(0);
    }
    let mut net = Net::new()?;
    let server = net.add_node("redis")?;
    let workers = (0..o.workers)
        .map(|i| net.add_node(&format!("w{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let observer = net.add_observer("obs")?;
    let ip = net.node(server).ip;
    let dir = tempfile::Builder::new()
        .prefix("fairlock-net-redis-")
        .tempdir()?;
    let mut redis = KillOnDrop(
        net.command(server, "redis-server")
            .args(["--bind", &ip.to_string(), "--port", "6379"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()?,
    );
    let gateway = net.gateway(observer, SocketAddr::from((ip, 6379))).await?;
    let client = redis::Client::open(format!("redis://{}/", gateway.addr))?;
    let mut conn = ready(&client, &mut redis.0).await?;
    let url = format!("redis://{ip}:6379/");
    println!(
        "\nRedis (single instance) at {url} in namespace {}",
        net.node(server).ns
    );
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let mut reports = Vec::new();
    for &fair in &o.modes {
        let mode = if fair { "fair" } else { "unfair" };
        println!("\n== Redis {mode} phase ==");
        let prefix = format!("fl-net:{run_id}:{mode}:");
        let mut phase = RedisPhase {
            o,
            net: &net,
            workers: &workers,
            shared: Shared::default(),
            slots: Vec::new(),
            injections: Vec::new(),
        };
        let result = phase.run(&url, &prefix, fair).await;
        phase.stop().await;
        result?;
        reports.push(phase.check(&mut conn, &prefix, fair).await?);
    }
    drop(redis);
    let violations = crate::table::print(&reports, o);
    Ok(violations)
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A connection once the server answers PING (polled: it has no event).
async fn ready(
    client: &redis::Client,
    server: &mut Child,
) -> Result<redis::aio::MultiplexedConnection, BoxError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut c) = client.get_multiplexed_async_connection().await
            && redis::cmd("PING")
                .query_async::<String>(&mut c)
                .await
                .is_ok()
        {
            return Ok(c);
        }
        if server.try_wait()?.is_some() || Instant::now() >= deadline {
            return Err("redis-server in its namespace did not answer".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct RedisPhase<'a> {
    o: &'a Opts,
    net: &'a Net,
    workers: &'a [usize],
    shared: Shared,
    slots: Vec<(Child, Option<ChildStdin>)>,
    injections: Vec<Injection>,
}

impl RedisPhase<'_> {
    async fn run(&mut self, url: &str, prefix: &str, fair: bool) -> Result<(), BoxError> {
        for (proc, &node) in self.workers.iter().enumerate() {
            let mut child = self
                .net
                .command(node, std::env::current_exe()?)
                .args(redis_worker::Args::to_argv(
                    proc,
                    url,
                    url,
                    prefix,
                    fair,
                    self.o.hold,
                    self.o,
                ))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()?;
            self.shared.read(
                proc,
                child.id(),
                child.stdout.take().ok_or("no worker stdout")?,
            );
            let stdin = child.stdin.take();
            self.slots.push((child, stdin));
        }
        let n = self.workers.len();
        self.shared
            .wait_for(Instant::now() + Duration::from_secs(60), |log| {
                let served = log
                    .procs
                    .values()
                    .filter(|p| p.events.iter().any(|e| e.kind == Kind::Acq));
                (served.count() == n).then_some(())
            })
            .await
            .ok_or("the Redis workers did not all get the lock within 60 s")?;
        let mut schedule = vec![Fault::Baseline];
        for _ in 0..self.o.rounds {
            schedule.extend([Fault::HolderCut, Fault::HolderCut]);
        }
        for fault in schedule {
            let inj = self.inject(fault).await?;
            let recovery = inj.recovery.map_or("none".into(), |r| {
                format!("{:.0} ms", crate::ms(r - inj.measure_from))
            });
            println!(
                "  {:<28} recovered after {recovery}",
                fault.label(self.o.ttl)
            );
            if let Some(prev) = self.injections.last_mut() {
                prev.end = inj.start;
            }
            self.injections.push(inj);
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        if let Some(last) = self.injections.last_mut() {
            last.end = mono_ns();
        }
        Ok(())
    }

    async fn inject(&mut self, fault: Fault) -> Result<Injection, BoxError> {
        let start = mono_ns();
        let mut inj = Injection::at(fault, start);
        if fault == Fault::HolderCut {
            let since = mono_ns();
            let (proc, _, _) = self
                .shared
                .wait_for(Instant::now() + Duration::from_secs(20), |log| {
                    log.holder().filter(|&(_, t, _)| t > since)
                })
                .await
                .ok_or("no Redis worker took the lock within 20 s")?;
            let node = self.workers[proc];
            inj.target = Some(proc);
            let cut = mono_ns();
            self.net.cut(node)?;
            tokio::time::sleep(self.o.ttl + PAST_TTL).await;
            self.net.heal(node)?;
            inj.cut = Some((cut, mono_ns()));
            inj.measure_from = cut;
        } else {
            tokio::time::sleep(Duration::from_secs(3)).await;
            inj.measure_from = mono_ns();
        }
        let (from, target) = (inj.measure_from, inj.target);
        let bound = fault.bound(self.o) * 2;
        inj.recovery = self
            .shared
            .wait_for(Instant::now() + bound, |log| {
                log.grants_after(from)
                    .into_iter()
                    .find(|&(_, p, _)| Some(p) != target)
                    .map(|(t, _, _)| t)
            })
            .await;
        Ok(inj)
    }

    /// Closes the workers' stdin, waits for their goodbye, kills laggards.
    async fn stop(&mut self) {
        for (_, stdin) in &mut self.slots {
            drop(stdin.take());
        }
        let n = self.slots.len();
        let done = self
            .shared
            .wait_for(Instant::now() + Duration::from_secs(30), |log| {
                let bye = log
                    .procs
                    .values()
                    .filter(|p| p.events.iter().any(|e| e.kind == Kind::Bye));
                (bye.count() == n).then_some(())
            })
            .await;
        for (child, _) in &mut self.slots {
            if done.is_none() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }

    async fn check(
        &mut self,
        conn: &mut redis::aio::MultiplexedConnection,
        prefix: &str,
        fair: bool,
    ) -> Result<Report, BoxError> {
        let bound = Fault::HolderCut.bound(self.o);
        // A cut holder's lock expires on its own within the TTL.
        let deadline = Instant::now() + bound;
        let locks = loop {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{prefix}locks:*"))
                .query_async(conn)
                .await?;
            // The fence counter and the epoch stay by design (one server:
            // one of each under the prefix): tokens must keep growing
            // across every holder the key will ever have, and a server
            // that lost them must be told apart (`src/redis/protocol/epoch.rs`).
            let kept = [
                format!("{prefix}locks:_OWNERS_/fence"),
                format!("{prefix}locks:_OWNERS_/epoch"),
            ];
            let keys: Vec<String> = keys.into_iter().filter(|k| !kept.contains(k)).collect();
            if keys.is_empty() || Instant::now() >= deadline {
                break keys;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let counter: Option<u64> = redis::cmd("GET")
            .arg(format!("{prefix}data:counter"))
            .query_async(conn)
            .await?;
        let counter = counter.unwrap_or(0);
        let inp = Input::without_history(fair, self.o, &self.shared, &mut self.injections, locks);
        let (mut v, mut notes) = (Vec::new(), Vec::new());
        check::harness(&inp, &mut v);
        crate::redis_check::counter(&inp, counter, &mut v, &mut notes);
        let intervals = check::intervals(&inp.log);
        for (a, later) in check::overlaps(&intervals) {
            let b = later[0];
            v.push(Violation {
                checker: 2,
                t: Some(b.acq),
                text: format!(
                    "the critical section of worker {} (token {}) overlaps worker {}'s \
                     (token {}) by {:.1} ms",
                    a.proc,
                    a.token,
                    b.proc,
                    b.token,
                    crate::ms(a.end - b.acq)
                ),
            });
        }
        crate::net_check::check(&inp, &mut v, &mut notes);
        for inj in &inp.injections {
            let took = inj
                .recovery
                .map(|r| Duration::from_nanos(r - inj.measure_from));
            if took.is_none_or(|d| d > bound) {
                v.push(Violation {
                    checker: 4,
                    t: Some(inj.start),
                    text: format!(
                        "{}: no lock granted within {} ms",
                        inj.fault.label(self.o.ttl),
                        bound.as_millis()
                    ),
                });
            }
        }
        if !inp.leftovers.0.is_empty() {
            v.push(Violation {
                checker: 5,
                t: None,
                text: format!("left behind: {:?}", inp.leftovers.0),
            });
        }
        let rows = crate::table::rows(&inp, &v);
        Ok(Report {
            mode: if fair { "redis fair" } else { "redis unfair" },
            rows,
            violations: v,
            notes,
        })
    }
}
