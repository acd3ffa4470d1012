//! The old Sentinel master cut off from the sentinels and its replica but
//! not from its clients (`--redis sentinel --net`, as root): the
//! deployment and the workers each in a network namespace
//! (`redis_ns_sentinel.rs`). Worker 0 holds the lock at least 3 x TTL each
//! time (the failover alone takes about 3 s) and each cut lands while it
//! holds: nftables drop the master's traffic to and from the sentinels and
//! the replica, while every worker still reaches the master and the
//! sentinels. The sentinels promote the replica and announce
//! `+switch-master`; once another worker was granted the lock on the new
//! master the cut heals and the sentinels make the old master a replica.
//!
//! On the cut-off master `WAIT` gets no replica's acknowledgement, so the
//! holder's extends there do not count (the library's default,
//! `ReplicaAcks::All`) and it must be told of the loss before anyone is
//! granted the lock on the new master. `FAIRLOCK_REPLICA_ACKS=off` in the
//! environment turns that off in the workers: the run must then fail.
//!
//! Checks, each failing the run on a violation: the counter (1), no
//! overlapping critical sections unless the earlier holder's next fenced
//! write was refused (2, `redis_check.rs`), the cut-off holder told of the
//! loss before another worker was granted (2, `net_check.rs`), recovery
//! within long hold + TTL + failover allowance + margin of the cut (4),
//! nothing left on the master but the fence and the epoch (5), tokens
//! never going back (6).

use std::process::{Child, ChildStdin, Stdio};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;

use crate::check::{self, Input, Report};
use crate::events::{Kind, Shared};
use crate::fault::{Fault, Injection};
use crate::redis_fault::{self, RedisFault};
use crate::redis_ns_sentinel::NsSentinel;
use crate::support::net::Net;
use crate::{BoxError, Opts, mono_ns, redis_check, redis_worker};

const CUTOFF: Fault = Fault::Redis(RedisFault::SentinelCutoff);
/// Grants to see after the deployment is whole before the next cut.
const SETTLE_GRANTS: usize = 3;
/// A hang guard for the failover and for the deployment to be whole.
const HANG: Duration = Duration::from_secs(60);

/// Runs one phase per mode; prints the table; returns the violations.
pub async fn run(o: &Opts) -> Result<usize, BoxError> {
    if let Some(why) = Net::unavailable() {
        println!("Redis cut-off master run SKIPPED: {why}");
        return Ok(0);
    }
    let started = Instant::now();
    let mut o = o.clone();
    o.long_hold = o.long_hold.max(o.ttl * 3);
    let o = &o;
    let d = NsSentinel::start(o.workers).await?;
    println!(
        "\nRedis cut-off master run: master + replica + 3 sentinels at {}; resource at {}; \
         namespaces {}",
        d.url(),
        d.resource_url(),
        d.net.namespaces().join(" ")
    );
    let acks = std::env::var("FAIRLOCK_REPLICA_ACKS").unwrap_or_default();
    println!(
        "workers' replica acknowledgements: {}; worker 0 holds {} ms",
        if acks.trim().is_empty() {
            "all (default)"
        } else {
            acks.trim()
        },
        o.long_hold.as_millis()
    );
    println!(
        "  {}: {}",
        CUTOFF.label(o.ttl),
        RedisFault::SentinelCutoff.promise()
    );
    let mut schedule = vec![Fault::Baseline];
    schedule.extend(std::iter::repeat_n(CUTOFF, o.rounds));
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let mut reports = Vec::new();
    for &fair in &o.modes {
        let mode = if fair { "fair" } else { "unfair" };
        println!("\n== Redis sentinel cut-off {mode} phase ==");
        let mut phase = Phase {
            o,
            d: &d,
            prefix: format!("fl-cut:{run_id}:{mode}:"),
            fair,
            shared: Shared::default(),
            slots: Vec::new(),
            injections: Vec::new(),
        };
        let result = phase.run(&schedule).await;
        phase.stop().await;
        result?;
        reports.push(phase.check().await?);
    }
    drop(d);
    println!("\nsentinel deployment in namespaces:");
    let violations = crate::table::print_bounded(&reports, redis_fault::bound(o));
    println!("total time {:.0} s", started.elapsed().as_secs_f64());
    Ok(violations)
}

struct Phase<'a> {
    o: &'a Opts,
    d: &'a NsSentinel,
    prefix: String,
    fair: bool,
    shared: Shared,
    slots: Vec<(Child, Option<ChildStdin>)>,
    injections: Vec<Injection>,
}

impl Phase<'_> {
    async fn run(&mut self, schedule: &[Fault]) -> Result<(), BoxError> {
        for (proc, &node) in self.d.workers.iter().enumerate() {
            let hold = if proc == 0 {
                self.o.long_hold
            } else {
                self.o.hold
            };
            let mut child = self
                .d
                .net
                .command(node, std::env::current_exe()?)
                .args(redis_worker::Args::to_argv(
                    proc,
                    &self.d.url(),
                    &self.d.resource_url(),
                    &self.prefix,
                    self.fair,
                    hold,
                    self.o,
                ))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()?;
            let stdout = child.stdout.take().ok_or("no worker stdout")?;
            self.shared.read(proc, child.id(), stdout);
            let stdin = child.stdin.take();
            self.slots.push((child, stdin));
        }
        // Worker 0 (the holder the cuts wait for) and enough others served
        // before the faults.
        self.shared.wait_served(self.fair, self.slots.len()).await?;
        for &fault in schedule {
            let (inj, settled) = self.inject(fault).await?;
            if let Some(prev) = self.injections.last_mut() {
                prev.end = inj.start;
            }
            self.injections.push(inj);
            self.shared
                .wait_for(Instant::now() + fault.bound(self.o), |log| {
                    (log.grants_after(settled).len() >= SETTLE_GRANTS).then_some(())
                })
                .await;
        }
        if let Some(last) = self.injections.last_mut() {
            last.end = mono_ns();
        }
        Ok(())
    }

    /// Injects `fault` once worker 0 holds the lock; returns the injection
    /// and from when the workers are back in their stride.
    async fn inject(&mut self, fault: Fault) -> Result<(Injection, u64), BoxError> {
        let since = mono_ns();
        self.shared
            .wait_for(Instant::now() + self.o.long_hold * 4 + HANG, |log| {
                let p = log.procs.get(&0)?;
                let last =
                    p.events.iter().rev().find(|e| {
                        matches!(e.kind, Kind::Acq | Kind::Rel | Kind::Lost | Kind::Bye)
                    })?;
                (last.kind == Kind::Acq && last.t > since).then_some(())
            })
            .await
            .ok_or("worker 0 did not take the lock within the wait")?;
        let start = mono_ns();
        let mut inj = Injection::at(fault, start);
        let bound = fault.bound(self.o);
        let first_other = |log: &crate::events::Log| {
            log.grants_after(start)
                .into_iter()
                .find(|&(_, p, _)| p != 0)
                .map(|(t, _, _)| t)
        };
        if fault != CUTOFF {
            // The baseline: from worker 0's unlock (it holds longer than
            // the bound) to the next grant.
            let from = self
                .shared
                .wait_for(Instant::now() + self.o.long_hold * 2, |log| {
                    let p = log.procs.get(&0)?;
                    let rel = p
                        .events
                        .iter()
                        .find(|e| e.kind == Kind::Rel && e.t > start)?;
                    Some(rel.t)
                })
                .await
                .ok_or("worker 0 did not let go of the lock")?;
            inj.measure_from = from;
            inj.recovery = self
                .shared
                .wait_for(Instant::now() + bound * 2, |log| {
                    log.grants_after(from).first().map(|&(t, _, _)| t)
                })
                .await;
            self.print(&inj, "");
            let settled = inj.recovery.unwrap_or(start);
            return Ok((inj, settled));
        }
        let d = self.d;
        let old = d.master().await?;
        let mut switches = d.switches().await?;
        d.cut(old)?;
        let cut = mono_ns();
        inj.target = Some(0);
        // The switch away from `old` (a sentinel may repeat an earlier one
        // right after subscribing: not this one).
        let deadline = Instant::now() + HANG;
        let new = loop {
            let msg = tokio::time::timeout_at(deadline, switches.next())
                .await
                .map_err(|_| d.failed("no +switch-master within 60 s of the cut".into()))?
                .ok_or("the sentinel's events ended")?;
            let text: String = msg.get_payload()?;
            // "<name> <old ip> <old port> <new ip> <new port>"
            let ip = |n| text.split_whitespace().nth(n)?.parse().ok();
            match (ip(1), ip(3)) {
                (Some(from), Some(to)) if from == d.ip(old) && to != from => {
                    break d.data_node(to)?;
                }
                (Some(_), Some(_)) => println!("  (ignored +switch-master {text:?})"),
                _ => return Err(format!("odd +switch-master {text:?}").into()),
            }
        };
        let switched = mono_ns();
        // Healed once another worker has the lock on the new master (or
        // after twice the bound: checker 4 then reports it).
        inj.recovery = self
            .shared
            .wait_for(Instant::now() + bound * 2, first_other)
            .await;
        d.heal()?;
        let healed = mono_ns();
        inj.cut = Some((cut, healed));
        let whole = d.whole(new, old).await?;
        let ms = |t: u64| crate::ms(t - start);
        self.print(
            &inj,
            &format!(
                "{} -> {} switched after {:.0} ms, healed after {:.0} ms, whole again after \
                 {:.0} ms",
                d.net.node(old).name,
                d.net.node(new).name,
                ms(switched),
                ms(healed),
                ms(whole)
            ),
        );
        Ok((inj, whole))
    }

    fn print(&self, inj: &Injection, what: &str) {
        println!(
            "  {:<38} recovered after {:>9}  {what}",
            inj.fault.label(self.o.ttl),
            inj.recovery.map_or("none".into(), |r| format!(
                "{:.0} ms",
                crate::ms(r - inj.measure_from)
            ))
        );
    }

    /// Closes the workers' stdin, waits for their goodbye, kills laggards.
    async fn stop(&mut self) {
        for (_, stdin) in &mut self.slots {
            drop(stdin.take());
        }
        let n = self.slots.len();
        self.shared
            .wait_for(Instant::now() + Duration::from_secs(30), |log| {
                let bye = log
                    .procs
                    .values()
                    .filter(|p| p.events.iter().any(|e| e.kind == Kind::Bye));
                (bye.count() == n).then_some(())
            })
            .await;
        for (child, _) in &mut self.slots {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }

    async fn check(&mut self) -> Result<Report, BoxError> {
        let locks = format!("{}locks:", self.prefix);
        // The fence and the epoch stay by design (`redis_faults.rs`'s
        // `expected_left`); a session a fault cut short expires in a TTL.
        let kept = [
            format!("{locks}_OWNERS_/fence"),
            format!("{locks}_OWNERS_/epoch"),
        ];
        let deadline = Instant::now() + redis_fault::bound(self.o);
        let left = loop {
            let keys: Vec<String> = self
                .d
                .keys(&locks)
                .await?
                .into_iter()
                .filter(|k| !kept.contains(k))
                .collect();
            if keys.is_empty() || Instant::now() >= deadline {
                break keys;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let port = self.d.port(self.d.resource);
        let counter: Option<u64> = crate::redis_deploy::query(
            port,
            &crate::redis_deploy::cmd(&["GET", &format!("{}data:counter", self.prefix)]),
        )
        .await
        .ok_or("GET of the counter on the resource server failed")?;
        let inp =
            Input::without_history(self.fair, self.o, &self.shared, &mut self.injections, left);
        let (mut v, mut notes) = (Vec::new(), Vec::new());
        check::harness(&inp, &mut v);
        redis_check::counter(&inp, counter.unwrap_or(0), &mut v, &mut notes);
        let intervals = check::intervals(&inp.log);
        redis_check::exclusion(&inp, &intervals, &mut v, &mut notes);
        crate::net_check::check(&inp, &mut v, &mut notes);
        redis_check::tokens(&inp, &mut v, &mut notes);
        Ok(check::report(&inp, v, notes))
    }
}
