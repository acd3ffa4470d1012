//! The orchestrator: starts the cluster, runs one phase per mode (workers,
//! faults one after another), then hands what it saw to the checkers.

use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use etcd_client::{Client, GetOptions};
use tokio::time::Instant;

use crate::check::{self, Report};
use crate::events::{Kind, Shared};
use crate::fault::{Fault, Injection};
use crate::net_phases::NetEnv;
use crate::retry::retrying;
use crate::support::cluster::{Cluster, ELECTION_TIMEOUT};
use crate::workload::Workload;
use crate::{BoxError, Opts, election_check, history, mono_ns, worker};

/// etcd members.
pub const MEMBERS: usize = 3;

/// A worker slot's current process.
pub struct Slot {
    pub proc: usize,
    pub child: Child,
    pub stdin: Option<ChildStdin>,
}

pub async fn run(o: &Opts) -> Result<usize, BoxError> {
    let started = Instant::now();
    let mut cluster = Cluster::start(MEMBERS)?;
    let mut schedule = vec![Fault::Baseline];
    for _ in 0..o.rounds {
        schedule.extend([
            Fault::LeaderPause(Duration::from_millis(500)),
            Fault::LeaderPause(Duration::from_millis(1500)),
            Fault::LeaderPause(Duration::from_secs(3)),
            Fault::MemberKill,
            Fault::LeaderKill,
            // Twice: the holder faults are what fencing is for.
            Fault::HolderPause,
            Fault::HolderKill,
            Fault::HolderPause,
            Fault::HolderKill,
            Fault::HolderRevoke,
        ]);
    }
    let reports = phases(o, &mut cluster, None, &schedule).await?;
    drop(cluster);
    let violations = crate::table::print(&reports, o);
    println!("total time {:.0} s", started.elapsed().as_secs_f64());
    Ok(violations)
}

/// One phase per mode on `cluster` (its members and the workers in `net`,
/// if given), injecting `schedule`; the checkers' reports.
pub async fn phases(
    o: &Opts,
    cluster: &mut Cluster,
    net: Option<&NetEnv>,
    schedule: &[Fault],
) -> Result<Vec<Report>, BoxError> {
    let leader = cluster.wait_leader(Duration::from_secs(20)).await?;
    println!(
        "etcd cluster {} (leader m{leader}; heartbeat 100 ms, election timeout {} ms); \
         {} workers, TTL {} ms, request timeout {} ms, hold {} ms, {} round(s)",
        cluster.endpoints().join(","),
        ELECTION_TIMEOUT.as_millis(),
        o.workers,
        o.ttl.as_millis(),
        o.request_timeout.as_millis(),
        o.hold.as_millis(),
        o.rounds
    );
    let bound = Fault::Baseline.bound(o);
    println!(
        "liveness bound: TTL {} ms + election timeout {} ms + margin {} ms = {} ms",
        o.ttl.as_millis(),
        ELECTION_TIMEOUT.as_millis(),
        o.margin.as_millis(),
        bound.as_millis()
    );
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let mut reports = Vec::new();
    for &fair in &o.modes {
        let mode = if fair { "fair" } else { "unfair" };
        println!("\n== {mode} phase ==");
        let prefix = format!("/fairlock-faults/{run_id}/{mode}/");
        let mut phase = Phase::new(o, fair, prefix, cluster, net).await?;
        let result = phase.run(schedule).await;
        // Whatever happened, no worker outlives the phase.
        phase.stop_workers().await;
        result?;
        if o.workload == Workload::Election {
            phase.finale = phase.converge().await?;
        }
        let report = phase.check().await?;
        reports.push(report);
    }
    Ok(reports)
}

pub struct Phase<'a> {
    pub o: &'a Opts,
    pub fair: bool,
    pub prefix: String,
    pub cluster: &'a mut Cluster,
    pub net: Option<&'a NetEnv>,
    pub client: Client,
    pub shared: Shared,
    pub slots: Vec<Slot>,
    pub next_proc: usize,
    pub injections: Vec<Injection>,
    pub first_revision: i64,
    /// The election workload's observer process.
    pub observer: Option<Slot>,
    /// What the election workload's end showed (`converge`).
    pub finale: Vec<election_check::Finding>,
}

impl<'a> Phase<'a> {
    async fn new(
        o: &'a Opts,
        fair: bool,
        prefix: String,
        cluster: &'a mut Cluster,
        net: Option<&'a NetEnv>,
    ) -> Result<Phase<'a>, BoxError> {
        let mut client = Client::connect(cluster.endpoints(), None).await?;
        let first_revision = client
            .get(prefix.as_str(), Some(GetOptions::new().with_count_only()))
            .await?
            .header()
            .map_or(0, |h| h.revision());
        Ok(Phase {
            o,
            fair,
            prefix,
            cluster,
            net,
            client,
            shared: Shared::default(),
            slots: Vec::new(),
            next_proc: 0,
            injections: Vec::new(),
            first_revision,
            observer: None,
            finale: Vec::new(),
        })
    }

    pub fn locks(&self) -> String {
        format!("{}locks/", self.prefix)
    }

    fn counter(&self) -> String {
        format!("{}data/counter", self.prefix)
    }

    /// Starts a worker process in `slot` (replacing a dead one).
    pub fn spawn(&mut self, slot: usize) -> Result<(), BoxError> {
        let proc = self.next_proc;
        self.next_proc += 1;
        // In a test network, a worker reaches the members' own addresses
        // from its node, through a delay relay of its own.
        let endpoints = match self.net {
            Some(_) => self.cluster.member_endpoints(),
            None => self.cluster.endpoints(),
        };
        let argv = worker::Args::to_argv(
            proc,
            &endpoints,
            &self.locks(),
            &self.counter(),
            self.fair,
            self.net.is_some(),
            self.o,
        );
        let exe = std::env::current_exe()?;
        let mut command = match self.net {
            Some(env) => env.net.command(env.workers[slot], exe),
            None => Command::new(exe),
        };
        let mut child = command
            .args(argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no worker stdout")?;
        self.shared.read(proc, child.id(), stdout);
        let entry = Slot {
            proc,
            stdin: child.stdin.take(),
            child,
        };
        if slot < self.slots.len() {
            self.slots[slot] = entry;
        } else {
            self.slots.push(entry);
        }
        Ok(())
    }

    async fn run(&mut self, schedule: &[Fault]) -> Result<(), BoxError> {
        let chosen = |f: &Fault| {
            *f == Fault::Baseline
                || self
                    .o
                    .only
                    .as_ref()
                    .is_none_or(|only| f.label(self.o.ttl).contains(only.as_str()))
        };
        let schedule: Vec<Fault> = schedule.iter().copied().filter(chosen).collect();
        for slot in 0..self.o.workers {
            self.spawn(slot)?;
        }
        if self.o.workload == Workload::Election {
            self.spawn_observer()?;
        }
        // Start once every worker has taken the lock at least once.
        let workers = self.o.workers;
        let all_in = self
            .shared
            .wait_for(Instant::now() + Duration::from_secs(60), |log| {
                let served = log
                    .procs
                    .values()
                    .filter(|p| p.events.iter().any(|e| e.kind == Kind::Acq))
                    .count();
                (served == workers).then_some(())
            })
            .await;
        if all_in.is_none() {
            return Err("the workers did not all get the lock within 60 s".into());
        }

        for fault in schedule {
            let label = fault.label(self.o.ttl);
            let inj = self.inject(fault).await?;
            let recovery = inj.recovery.map_or("none".into(), |r| {
                format!("{:.0} ms", crate::ms(r - inj.measure_from))
            });
            let elected = inj.elected.map_or(String::new(), |e| {
                format!(
                    " (new leader after {:.0} ms)",
                    crate::ms(e - inj.measure_from)
                )
            });
            println!(
                "  {label:<28} recovered after {recovery}{elected}{}",
                if inj.missed {
                    " (missed the holder)"
                } else {
                    ""
                }
            );
            self.settle().await?;
        }
        // The last injection's window ends here.
        if let Some(last) = self.injections.last_mut() {
            last.end = mono_ns();
        }
        Ok(())
    }

    /// Closes every worker's stdin (they finish their cycle, close their
    /// locker and exit), waits for them, and kills any that hang.
    async fn stop_workers(&mut self) {
        for s in &mut self.slots {
            drop(s.stdin.take());
        }
        let procs: Vec<usize> = self.slots.iter().map(|s| s.proc).collect();
        let done = self
            .shared
            .wait_for(Instant::now() + Duration::from_secs(30), |log| {
                procs
                    .iter()
                    .all(|p| {
                        log.procs
                            .get(p)
                            .is_some_and(|p| p.events.iter().any(|e| e.kind == Kind::Bye))
                    })
                    .then_some(())
            })
            .await;
        for s in &mut self.slots {
            if done.is_none() {
                let _ = s.child.kill();
            }
            let _ = s.child.wait();
        }
    }

    /// Waits for leftovers to go, replays etcd's history, runs the checkers.
    async fn check(&mut self) -> Result<Report, BoxError> {
        // A killed or paused worker's lease expires on its own, within
        // the TTL (plus an election, should one happen).
        let bound = self.o.ttl + ELECTION_TIMEOUT + self.o.margin;
        let leftovers = self.leftovers(bound).await?;
        let sentinel = format!("{}zz-history-end", self.prefix);
        let (prefix, first) = (self.prefix.clone(), self.first_revision);
        let changes = retrying("history replay", || {
            let (mut client, prefix, sentinel) =
                (self.client.clone(), prefix.clone(), sentinel.clone());
            async move { history::replay(&mut client, &prefix, first, &sentinel).await }
        })
        .await?;
        let log = std::mem::take(&mut *self.shared.lock());
        if let Some(dir) = &self.o.dump {
            dump(dir, self.fair, &log, &changes, &self.injections)?;
        }
        let input = check::Input {
            fair: self.fair,
            opts: self.o,
            log,
            changes,
            injections: std::mem::take(&mut self.injections),
            lock_key: format!("{}{}", self.locks(), worker::LOCK_KEY),
            counter: self.counter(),
            leftovers,
        };
        Ok(match self.o.workload {
            Workload::Mutex => check::check(input),
            Workload::Shared => crate::shared_check::check(input),
            Workload::Election => election_check::check(input, std::mem::take(&mut self.finale)),
        })
    }

    /// Keys under the lock prefix and leases still in etcd, once both are
    /// gone or `within` passed. Polled: etcd has no event for a lease's
    /// expiry that names the lease.
    async fn leftovers(&mut self, within: Duration) -> Result<(Vec<String>, Vec<i64>), BoxError> {
        let deadline = Instant::now() + within;
        loop {
            let locks = self.locks();
            let (keys, leases) = retrying("leftover check", || {
                let (mut client, locks) = (self.client.clone(), locks.clone());
                async move {
                    let keys: Vec<String> = client
                        .get(
                            locks,
                            Some(GetOptions::new().with_prefix().with_keys_only()),
                        )
                        .await?
                        .kvs()
                        .iter()
                        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
                        .collect();
                    let leases: Vec<i64> = client
                        .leases()
                        .await?
                        .leases()
                        .iter()
                        .map(|l| l.id())
                        .collect();
                    Ok::<_, BoxError>((keys, leases))
                }
            })
            .await?;
            if (keys.is_empty() && leases.is_empty()) || Instant::now() >= deadline {
                return Ok((keys, leases));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Phase<'_> {
    fn drop(&mut self) {
        for s in self.slots.iter_mut().chain(self.observer.as_mut()) {
            drop(s.stdin.take());
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
    }
}

/// Writes the phase's events, injections and etcd history as text.
fn dump(
    dir: &std::path::Path,
    fair: bool,
    log: &crate::events::Log,
    changes: &[history::Change],
    injections: &[Injection],
) -> Result<(), BoxError> {
    use std::fmt::Write as _;
    let mode = if fair { "fair" } else { "unfair" };
    std::fs::create_dir_all(dir)?;
    let mut events = String::new();
    for inj in injections {
        writeln!(events, "{inj:?}")?;
    }
    let mut all: Vec<_> = log
        .procs
        .iter()
        .flat_map(|(n, p)| p.events.iter().map(move |e| (e.t, *n, p.pid, e)))
        .collect();
    all.sort_by_key(|&(t, n, _, _)| (t, n));
    for (_, n, pid, e) in all {
        writeln!(events, "proc {n} pid {pid}: {e:?}")?;
    }
    std::fs::write(dir.join(format!("{mode}-events.txt")), events)?;
    let mut hist = String::new();
    for c in changes {
        writeln!(hist, "{c:?}")?;
    }
    std::fs::write(dir.join(format!("{mode}-history.txt")), hist)?;
    Ok(())
}
