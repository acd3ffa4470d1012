//! The Redis fault runs (`--redis single|sentinel|cluster`): the Redis
//! workers (`redis_worker.rs`) lock one key on a deployment
//! (`redis_deploy.rs`) with the library's defaults and the run's TTL,
//! while the deployment's faults (`redis_fault.rs`) are injected one after
//! another. Worker 0 holds the lock `--long-hold-ms` each time (1.5 x TTL
//! by default) and each fault lands while it holds: its lock must be extended
//! across the fault. Once the fault is done (a new master named, the
//! server restarted) a new worker starts, which finds the deployment
//! afresh as any process starting then would, and the oldest other worker
//! stops. Then the checks, each failing the run on a violation:
//! 1. the counter (on a resource server no fault touches) is within
//!    [acknowledged, acknowledged + indeterminate] increments;
//! 2. critical sections (CLOCK_MONOTONIC) never overlap, unless the
//!    earlier holder's next fenced write after the later grant was refused;
//! 4. after each fault, a lock is granted after the new master was named
//!    (or the server restarted) within long hold + TTL + failover
//!    allowance + margin of the injection;
//! 5. nothing is left under the run's prefix once the workers stopped
//!    but the fencing counter(s) and the epoch key(s) (`expected_left`);
//! 6. fencing tokens never go back: a grant's token is above every token
//!    granted before it.
//!
//! With `--workload shared|election` the workers run `sections.rs`'s
//! cycle instead, writing through `redis_sections.rs`'s fence, and the
//! checks are etcd's for that workload on the resource's record of the
//! writes (`redis_phase_check.rs`); the election's observer and its
//! finale are `redis_election.rs`'s. On a cluster the faults target the
//! slot of the workload's first key (`Workload::lock_keys`).

use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use crate::events::{Kind, Shared};
use crate::fault::{Fault, Injection};
use crate::redis_deploy::Redis;
use crate::redis_fault::{self, Deployment, RedisFault};
use crate::workload::Workload;
use crate::{BoxError, Opts, mono_ns, redis_worker};

/// Grants to see after a fault's recovery before the next fault: the
/// workers back in their stride.
const SETTLE_GRANTS: usize = 3;

/// Runs one phase per mode on a fresh deployment; prints the table;
/// returns the violations.
pub async fn run(o: &Opts, which: Deployment) -> Result<usize, BoxError> {
    let started = Instant::now();
    let mut redis = Redis::start(which, o.workload.lock_keys()[0]).await?;
    println!("\nRedis fault run: {}", redis.describe());
    println!(
        "counter and fence on a separate redis-server at {}",
        redis.resource_url()
    );
    let faults: Vec<RedisFault> = which
        .faults()
        .iter()
        .copied()
        .filter(|f| {
            o.only
                .as_ref()
                .is_none_or(|t| f.label().contains(t.as_str()))
        })
        .collect();
    println!("what Redis promises under each fault:");
    for f in &faults {
        println!("  {}: {}", f.label(), f.promise());
    }
    let mut schedule = vec![Fault::Baseline];
    for _ in 0..o.rounds {
        schedule.extend(faults.iter().map(|&f| Fault::Redis(f)));
    }
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let mut reports = Vec::new();
    for &fair in &o.modes {
        let mode = if fair { "fair" } else { "unfair" };
        println!("\n== Redis {} {mode} phase ==", which.name());
        let prefix = format!("fl-faults:{run_id}:{mode}:");
        let mut phase = Phase {
            o,
            url: redis.url(),
            resource: redis.resource_url(),
            prefix: prefix.clone(),
            fair,
            shared: Shared::default(),
            slots: Vec::new(),
            injections: Vec::new(),
            observer: None,
        };
        let result = phase.run(&mut redis, &schedule).await;
        phase.stop().await;
        result?;
        let finale = phase.converge().await?;
        reports.push(phase.check(&redis, finale).await?);
    }
    drop(redis);
    println!("\n{} deployment:", which.name());
    let bound = redis_fault::bound(o);
    let violations = crate::table::print_bounded(&reports, bound);
    println!("total time {:.0} s", started.elapsed().as_secs_f64());
    Ok(violations)
}

/// A worker process, killed if it has not stopped when dropped.
pub struct Slot {
    pub proc: usize,
    pub child: Child,
    pub stdin: Option<ChildStdin>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

pub struct Phase<'a> {
    pub o: &'a Opts,
    pub url: String,
    pub resource: String,
    pub prefix: String,
    pub fair: bool,
    pub shared: Shared,
    pub slots: Vec<Slot>,
    pub injections: Vec<Injection>,
    /// The election workload's observer (`redis_election.rs`).
    pub observer: Option<Slot>,
}

impl Phase<'_> {
    /// Starts worker `proc` (worker 0 is the long holder).
    fn spawn(&mut self, proc: usize) -> Result<(), BoxError> {
        let hold = if proc == 0 && !self.o.long_hold.is_zero() {
            self.o.long_hold
        } else {
            self.o.hold
        };
        let mut child = Command::new(std::env::current_exe()?)
            .args(redis_worker::Args::to_argv(
                proc,
                &self.url,
                &self.resource,
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
        self.slots.push(Slot { proc, child, stdin });
        Ok(())
    }

    /// The next process number.
    pub fn next_proc(&self) -> usize {
        let observer = self.observer.as_ref().map(|s| s.proc);
        let procs = self.slots.iter().map(|s| s.proc).chain(observer);
        procs.max().map_or(0, |p| p + 1)
    }

    /// A new worker joins, the oldest running one but worker 0 leaves
    /// (its stdin closed: it finishes its cycle and says goodbye).
    fn rotate(&mut self) -> Result<(), BoxError> {
        let next = self.next_proc();
        self.spawn(next)?;
        if let Some(old) = self
            .slots
            .iter_mut()
            .find(|s| s.proc != 0 && s.stdin.is_some())
        {
            drop(old.stdin.take());
        }
        Ok(())
    }

    async fn run(&mut self, redis: &mut Redis, schedule: &[Fault]) -> Result<(), BoxError> {
        for proc in 0..self.o.workers {
            self.spawn(proc)?;
        }
        if self.o.workload == Workload::Election {
            self.spawn_observer()?;
        }
        // Worker 0 (the long holder the faults wait for) and enough others
        // served before the faults start.
        self.shared.wait_served(self.fair, self.o.workers).await?;
        for &fault in schedule {
            let inj = self.inject(redis, fault).await?;
            if let Some(prev) = self.injections.last_mut() {
                prev.end = inj.start;
            }
            let settled = inj.recovery.unwrap_or(inj.measure_from);
            self.injections.push(inj);
            // The workers back in their stride before the next fault.
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

    async fn inject(&mut self, redis: &mut Redis, fault: Fault) -> Result<Injection, BoxError> {
        // Faults land while someone holds the lock: the long holder if
        // there is one.
        let since = mono_ns();
        let long = !self.o.long_hold.is_zero();
        self.shared
            .wait_for(
                Instant::now() + self.o.long_hold * 4 + Duration::from_secs(20),
                |log| {
                    let p = log.procs.get(&0)?;
                    let last = p.events.iter().rev().find(|e| {
                        matches!(e.kind, Kind::Acq | Kind::Rel | Kind::Lost | Kind::Bye)
                    })?;
                    let holds = last.kind == Kind::Acq && last.t > since;
                    let anyone = log.holder().filter(|&(_, t, _)| t > since);
                    if long {
                        holds.then_some(())
                    } else {
                        anyone.map(|_| ())
                    }
                },
            )
            .await
            .ok_or("no Redis worker took the lock within the wait")?;
        let (start, switched, done) = match fault {
            Fault::Redis(f) => {
                let done = redis.inject(f).await?;
                self.rotate()?;
                (done.start, done.switched, Some(done))
            }
            _ => {
                let t = mono_ns();
                (t, t, None)
            }
        };
        let bound = fault.bound(self.o);
        let recovery = self
            .shared
            .wait_for(Instant::now() + bound * 2, |log| {
                log.grants_after(switched).first().map(|&(t, _, _)| t)
            })
            .await;
        let mut what = String::new();
        if let Some(done) = done.as_ref().filter(|d| d.old != d.new) {
            let whole = redis.whole(done).await?;
            what = format!(
                "{}, whole again after {:.0} ms",
                done.what,
                crate::ms(whole - start)
            );
        } else if let Some(done) = &done {
            what = done.what.clone();
        }
        println!(
            "  {:<38} recovered after {:>9}  {what}",
            fault.label(self.o.ttl),
            recovery.map_or("none".into(), |r| format!("{:.0} ms", crate::ms(r - start)))
        );
        Ok(Injection {
            recovery,
            ..Injection::at(fault, start)
        })
    }

    /// Closes the workers' stdin, waits for their goodbye, kills laggards.
    async fn stop(&mut self) {
        for slot in &mut self.slots {
            drop(slot.stdin.take());
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
        // Dropping a slot kills a worker that is still running.
        self.slots.clear();
    }
}
