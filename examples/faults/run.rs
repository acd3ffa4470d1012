//! The orchestrator: starts the cluster, runs one phase per mode (workers,
//! faults one after another), then hands what it saw to the checkers.

use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use etcd_client::{Client, GetOptions};
use tokio::time::Instant;

use crate::check::{self, Report};
use crate::events::{Kind, Shared};
use crate::net_phases::NetEnv;
use crate::support::cluster::{Cluster, ELECTION_TIMEOUT, send_signal};
use crate::workload::Workload;
use crate::{BoxError, Opts, election_check, history, mono_ns, observer, worker};

/// etcd members.
pub const MEMBERS: usize = 3;
/// How long a killed member stays down before its restart.
const MEMBER_DOWN: Duration = Duration::from_secs(2);
/// Normal running between faults, so each fault starts from a steady state.
const SETTLE: Duration = Duration::from_millis(1500);
/// Fault-free running at the start of each phase.
const BASELINE: Duration = Duration::from_secs(3);
/// A holder is paused (or cut off) this much longer than its TTL.
pub const PAST_TTL: Duration = Duration::from_millis(1500);
/// How long the holder stays stopped after its lease was revoked.
const REVOKED_PAUSE: Duration = Duration::from_millis(500);
/// How often a holder fault is retried when its target had already
/// released the lock when the signal landed.
const HOLDER_TRIES: usize = 3;

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    Baseline,
    LeaderPause(Duration),
    MemberKill,
    LeaderKill,
    HolderPause,
    HolderKill,
    /// The holder's lease revoked while it is stopped for less than the
    /// TTL: what an etcd that ends a live lease early does (see
    /// `check::etcd_ended_lease`).
    HolderRevoke,
    /// The network faults (`net_phases.rs`).
    HolderCut,
    WaiterCut,
    LeaderMinority,
    Loss,
    DelaySpikes,
    LinkFlap,
}

impl Fault {
    pub fn label(self, ttl: Duration) -> String {
        match self {
            Fault::Baseline => "none (baseline)".into(),
            Fault::LeaderPause(d) => format!("SIGSTOP leader {:.1}s", d.as_secs_f64()),
            Fault::MemberKill => "kill -9 + restart follower".into(),
            Fault::LeaderKill => "kill -9 + restart leader".into(),
            Fault::HolderPause => {
                format!("SIGSTOP holder {:.1}s", (ttl + PAST_TTL).as_secs_f64())
            }
            Fault::HolderKill => "kill -9 holder".into(),
            Fault::HolderRevoke => format!(
                "lease revoked, holder stopped {:.1}s",
                REVOKED_PAUSE.as_secs_f64()
            ),
            net => crate::net_phases::label(net, ttl),
        }
    }

    /// Holder faults are measured from the injection: the lock is stuck
    /// until the holder's lease expires. Cluster faults from their healing.
    pub fn on_holder(self) -> bool {
        matches!(
            self,
            Fault::HolderPause
                | Fault::HolderKill
                | Fault::HolderRevoke
                | Fault::HolderCut
                | Fault::WaiterCut
                | Fault::LeaderMinority
        )
    }

    /// How soon a lock must be granted again (see `on_holder` for from
    /// when): TTL + election timeout + margin. An isolated leader costs
    /// one election timeout more: the new leader extends every lease by
    /// it when it takes over (etcd's lessor `Promote`); this assumes the
    /// majority elects it within one election timeout, and
    /// [`Injection::bound`] uses when it did.
    pub fn bound(self, o: &Opts) -> Duration {
        let bound = o.ttl + ELECTION_TIMEOUT + o.margin;
        if self == Fault::LeaderMinority {
            bound + ELECTION_TIMEOUT
        } else {
            bound
        }
    }
}

/// One injection, as done.
#[derive(Clone, Debug)]
pub struct Injection {
    pub fault: Fault,
    /// Window of the injection: from its start to the next one's.
    pub start: u64,
    pub end: u64,
    /// Recovery is measured from here (heal, or injection on a holder).
    pub measure_from: u64,
    /// First grant after `measure_from` (to another process, on a holder).
    pub recovery: Option<u64>,
    /// The paused or killed worker process, and the pause.
    pub target: Option<usize>,
    pub pause: Option<(u64, u64)>,
    /// When the target's link was cut and healed (network faults).
    pub cut: Option<(u64, u64)>,
    /// When the majority had a new leader (the isolated leader only).
    pub elected: Option<u64>,
    /// The holder had released before the signal landed: not counted.
    pub missed: bool,
}

impl Injection {
    /// How soon after `measure_from` a lock must be granted again: the
    /// fault's bound, and for the isolated leader TTL + election timeout +
    /// margin from when the majority had its new leader (etcd's lessor
    /// extends every lease by the election timeout at that moment, so the
    /// holder's lease cannot expire sooner, and how long the election takes
    /// is etcd's: a split vote costs another election timeout or two).
    pub fn bound(&self, o: &Opts) -> Duration {
        match (self.fault, self.elected) {
            (Fault::LeaderMinority, Some(elected)) => {
                Duration::from_nanos(elected.saturating_sub(self.measure_from))
                    + o.ttl
                    + ELECTION_TIMEOUT
                    + o.margin
            }
            (fault, _) => fault.bound(o),
        }
    }
}

/// A worker slot's current process.
pub struct Slot {
    pub proc: usize,
    child: Child,
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
    let violations = check::print(&reports, o);
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
    fair: bool,
    prefix: String,
    pub cluster: &'a mut Cluster,
    pub net: Option<&'a NetEnv>,
    pub client: Client,
    pub shared: Shared,
    pub slots: Vec<Slot>,
    next_proc: usize,
    injections: Vec<Injection>,
    first_revision: i64,
    /// The election workload's observer process.
    observer: Option<Slot>,
    /// What the election workload's end showed (`converge`).
    finale: Vec<election_check::Finding>,
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
    fn spawn(&mut self, slot: usize) -> Result<(), BoxError> {
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

    /// Starts the election workload's observer, outside the worker slots.
    fn spawn_observer(&mut self) -> Result<(), BoxError> {
        let proc = self.next_proc;
        self.next_proc += 1;
        let argv = observer::Args::to_argv(&self.cluster.endpoints(), &self.locks(), self.o);
        let mut child = Command::new(std::env::current_exe()?)
            .args(argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no observer stdout")?;
        self.shared.read(proc, child.id(), stdout);
        self.observer = Some(Slot {
            proc,
            stdin: child.stdin.take(),
            child,
        });
        Ok(())
    }

    /// Observers converge: with the workers gone, the orchestrator itself
    /// campaigns; the observer's last state must become its term (as
    /// `leader()` reads it) within the liveness bound, and after it
    /// resigns the empty seat `leader()` reads. Then the observer stops.
    async fn converge(&mut self) -> Result<Vec<election_check::Finding>, BoxError> {
        let Some(obs) = self.observer.as_ref().map(|s| s.proc) else {
            return Ok(Vec::new());
        };
        let config = observer::config(
            self.cluster.endpoints(),
            &self.locks(),
            self.o.ttl,
            self.o.request_timeout,
        );
        let locker = fairlock::etcd::EtcdLocker::connect(config, true).await?;
        let election = fairlock::Key::from(crate::workload::ELECTION);
        let mut findings = Vec::new();
        // A killed worker's lease may hold the seat for a TTL yet.
        let ctx = fairlock::Context::background().with_timeout(Duration::from_secs(30));
        let leadership =
            fairlock::Locker::campaign(&locker, &ctx, &election, b"end".to_vec()).await?;
        let what = "the orchestrator leads";
        findings.push(self.observer_matches(&locker, &election, obs, what).await);
        leadership.resign().await?;
        let what = "the seat is empty";
        findings.push(self.observer_matches(&locker, &election, obs, what).await);
        let _ = locker.close().await;
        if let Some(mut slot) = self.observer.take() {
            drop(slot.stdin.take());
            let bye = self
                .shared
                .wait_for(Instant::now() + Duration::from_secs(30), |log| {
                    log.procs
                        .get(&obs)
                        .is_some_and(|p| p.events.iter().any(|e| e.kind == Kind::Bye))
                        .then_some(())
                })
                .await;
            if bye.is_none() {
                let _ = slot.child.kill();
            }
            let _ = slot.child.wait();
        }
        Ok(findings)
    }

    /// Reads `leader()` and waits (the liveness bound) for observer
    /// `obs`'s last state to be the same term.
    async fn observer_matches(
        &self,
        locker: &fairlock::etcd::EtcdLocker,
        election: &fairlock::Key,
        obs: usize,
        what: &str,
    ) -> election_check::Finding {
        use fairlock::Locker as _;
        let bound = self.o.ttl + ELECTION_TIMEOUT + self.o.margin;
        let read = retrying("leader()", || async {
            Ok(locker
                .leader(election)
                .await?
                .map_or(0, |l| l.fencing_token))
        })
        .await;
        let term = match read {
            Ok(term) => term,
            Err(e) => {
                return election_check::Finding {
                    ok: false,
                    text: format!("{what}: {e}"),
                };
            }
        };
        let seen = self
            .shared
            .wait_for(Instant::now() + bound, |log| {
                (last_observed(log, obs) == Some(term)).then_some(())
            })
            .await;
        election_check::Finding {
            ok: seen.is_some(),
            text: format!(
                "{what}: leader() read term {term} (0: none); the observer's last state {} \
                 within {} ms",
                match seen {
                    Some(()) => "matched it".to_string(),
                    None => format!("was {:?}", last_observed(&self.shared.lock(), obs)),
                },
                bound.as_millis()
            ),
        }
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

    /// Injects `fault` (retrying a holder fault that missed its holder),
    /// waits for the recovery and records the injection.
    async fn inject(&mut self, fault: Fault) -> Result<Injection, BoxError> {
        let tries = if fault.on_holder() { HOLDER_TRIES } else { 1 };
        let mut inj = None;
        for _ in 0..tries {
            let done = self.inject_once(fault).await?;
            let missed = done.missed;
            self.push(done.clone());
            inj = Some(done);
            if !missed {
                break;
            }
        }
        inj.ok_or_else(|| "no injection".into())
    }

    fn push(&mut self, inj: Injection) {
        if let Some(prev) = self.injections.last_mut() {
            prev.end = inj.start;
        }
        self.injections.push(inj);
    }

    async fn inject_once(&mut self, fault: Fault) -> Result<Injection, BoxError> {
        let start = mono_ns();
        let mut inj = Injection {
            fault,
            start,
            end: start,
            measure_from: start,
            recovery: None,
            target: None,
            pause: None,
            cut: None,
            elected: None,
            missed: false,
        };
        match fault {
            Fault::Baseline => {
                tokio::time::sleep(BASELINE).await;
                inj.measure_from = mono_ns();
            }
            Fault::LeaderPause(d) => {
                let leader = self.cluster.wait_leader(Duration::from_secs(20)).await?;
                self.cluster.signal(leader, libc::SIGSTOP)?;
                tokio::time::sleep(d).await;
                self.cluster.signal(leader, libc::SIGCONT)?;
                inj.measure_from = mono_ns();
            }
            Fault::MemberKill | Fault::LeaderKill => {
                let leader = self.cluster.wait_leader(Duration::from_secs(20)).await?;
                let member = if fault == Fault::LeaderKill {
                    leader
                } else {
                    (leader + 1) % self.cluster.len()
                };
                self.cluster.kill(member)?;
                tokio::time::sleep(MEMBER_DOWN).await;
                let cluster = &mut *self.cluster;
                tokio::task::block_in_place(|| cluster.restart(member))?;
                inj.measure_from = mono_ns();
            }
            Fault::HolderPause | Fault::HolderKill | Fault::HolderRevoke => {
                let (proc, token) = self.fresh_holder().await?;
                let pid = self.shared.lock().procs.get(&proc).map_or(0, |p| p.pid);
                inj.target = Some(proc);
                if fault == Fault::HolderPause {
                    let stop = mono_ns();
                    send_signal(pid, libc::SIGSTOP)?;
                    tokio::time::sleep(self.o.ttl + PAST_TTL).await;
                    send_signal(pid, libc::SIGCONT)?;
                    inj.pause = Some((stop, mono_ns()));
                    inj.measure_from = stop;
                } else if fault == Fault::HolderRevoke {
                    // Stopped, so that it cannot see the loss before the
                    // next holder is granted: the sections overlap, as when
                    // etcd ends a lease early, and the fence must refuse
                    // its write.
                    let stop = mono_ns();
                    send_signal(pid, libc::SIGSTOP)?;
                    let revoked = self.revoke_lock_lease(token).await;
                    tokio::time::sleep(REVOKED_PAUSE).await;
                    send_signal(pid, libc::SIGCONT)?;
                    revoked?;
                    inj.measure_from = stop;
                } else {
                    let kill = mono_ns();
                    send_signal(pid, libc::SIGKILL)?;
                    if let Some(p) = self.shared.lock().procs.get_mut(&proc) {
                        p.killed_at = Some(kill);
                    }
                    inj.measure_from = kill;
                    self.respawn(proc)?;
                }
                inj.missed = self.released_before(proc, token, inj.measure_from);
            }
            net => self.inject_net(net, &mut inj).await?,
        }
        inj.recovery = self.await_recovery(&inj).await;
        Ok(inj)
    }

    /// Revokes the lease the lock key is bound to, as an operator's
    /// `etcdctl lease revoke` would, if the key is still the grant at
    /// `token` (else the target released already: the injection counts as
    /// missed, and no other worker's lease is touched). Retried like the
    /// orchestrator's other requests: its connection to a member that was
    /// killed and restarted before may fail once.
    async fn revoke_lock_lease(&self, token: u64) -> Result<(), BoxError> {
        // The other workloads' guards fence by their entry, some key under
        // the lock prefix: the one whose mod revision is the token.
        let (key, scope) = match self.o.workload {
            Workload::Mutex => (format!("{}{}", self.locks(), worker::LOCK_KEY), None),
            _ => (self.locks(), Some(GetOptions::new().with_prefix())),
        };
        retrying("lease revoke", || {
            let (mut client, key, scope) = (self.client.clone(), key.clone(), scope.clone());
            async move {
                let held = client.get(key, scope).await?;
                let lease = held
                    .kvs()
                    .iter()
                    .find(|kv| u64::try_from(kv.mod_revision()).ok() == Some(token))
                    .map(|kv| kv.lease());
                match lease {
                    Some(lease) => match client.lease_revoke(lease).await {
                        // An earlier try's revoke was applied after all.
                        Err(e) if e.to_string().contains("lease not found") => Ok(()),
                        done => done.map(drop).map_err(Into::into),
                    },
                    None => Ok(()),
                }
            }
        })
        .await
    }

    /// The next process to take the lock from now on, and its token: it is
    /// then in (or near) its `hold` sleep, before its fenced write.
    pub async fn fresh_holder(&self) -> Result<(usize, u64), BoxError> {
        let since = mono_ns();
        let (proc, _, token) = self
            .shared
            .wait_for(Instant::now() + Duration::from_secs(20), |log| {
                log.holder().filter(|&(_, t, _)| t > since)
            })
            .await
            .ok_or("no worker took the lock within 20 s")?;
        Ok((proc, token))
    }

    /// `true` if `proc` had already ended its critical section for `token`
    /// before `t` (its lines up to `t` are in: it wrote them before the
    /// signal, and the reader has had the whole pause or recovery to read).
    pub fn released_before(&self, proc: usize, token: u64, t: u64) -> bool {
        self.shared.lock().procs.get(&proc).is_some_and(|p| {
            p.events
                .iter()
                .any(|e| e.kind == Kind::Rel && e.token == token && e.t < t)
        })
    }

    /// Replaces killed process `proc` with a new one in its slot.
    fn respawn(&mut self, proc: usize) -> Result<(), BoxError> {
        let Some(slot) = self.slots.iter().position(|s| s.proc == proc) else {
            return Err(format!("worker process {proc} has no slot").into());
        };
        let _ = self.slots[slot].child.wait();
        self.spawn(slot)
    }

    /// Waits for the first grant after the injection healed (to a process
    /// other than the target, for holder faults); gives up at twice the
    /// liveness bound, which the checker reports.
    async fn await_recovery(&self, inj: &Injection) -> Option<u64> {
        let bound = inj.bound(self.o);
        let waited = Duration::from_nanos(mono_ns().saturating_sub(inj.measure_from));
        let deadline = Instant::now() + (bound * 2).saturating_sub(waited);
        let (from, target) = (inj.measure_from, inj.target);
        self.shared
            .wait_for(deadline, |log| {
                log.grants_after(from)
                    .into_iter()
                    .find(|&(_, p, _)| Some(p) != target)
                    .map(|(t, _, _)| t)
            })
            .await
    }

    /// Normal running before the next fault, and a leader in place.
    async fn settle(&mut self) -> Result<(), BoxError> {
        tokio::time::sleep(SETTLE).await;
        self.cluster.wait_leader(Duration::from_secs(20)).await?;
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

/// Observer `proc`'s last state in `log`: `Some(term)` (0: an empty seat).
fn last_observed(log: &crate::events::Log, proc: usize) -> Option<u64> {
    let p = log.procs.get(&proc)?;
    let last = p.events.iter().rev().find(|e| e.kind == Kind::Observed)?;
    Some(last.token)
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

/// Runs the orchestrator's own etcd request `op`, retrying failures for a
/// few seconds: after a member restart the client's first requests may
/// meet a closed connection.
async fn retrying<T, F, Fut>(what: &str, mut op: F) -> Result<T, BoxError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, BoxError>>,
{
    let mut tries = 0;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if tries >= 20 => return Err(format!("{what}: {e}").into()),
            Err(_) => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}
