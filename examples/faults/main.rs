//! Fault injection: a 3-member etcd cluster on loopback ports, worker
//! processes looping lock -> critical section (a fenced counter increment)
//! -> unlock, and faults injected one after another: SIGSTOP/SIGCONT of the
//! etcd leader, kill -9 and restart of a member and of the leader, SIGSTOP
//! of the lock holder past its TTL, kill -9 of the holder, and the holder's
//! lease revoked while the holder is stopped for less than its TTL.
//!
//! ```text
//! cargo run --example faults -- [--long] [--mode both|fair|unfair] [--workers 4]
//!     [--rounds N] [--ttl-ms 2000] [--hold-ms 40] [--margin-ms 2000]
//!     [--request-timeout-ms TTL] [--unfenced] [--dump DIR] [--net] [--only TEXT]
//! ```
//! `--workload shared|election` runs the same faults on another primitive
//! (`workload.rs`; loopback and the Redis runs, not `--net`;
//! `scripts/faults.sh [--redis] --workload W`):
//! `shared` mixes read and write locks on one key with one of two permits
//! of a semaphore on another, `election` has the workers campaign, lead
//! and resign while an observer process follows the election. Their
//! checkers are in `shared_check.rs` and `election_check.rs`.
//! `--soak SECS` runs the soak instead (`soak.rs`): lock cycles on many
//! keys in both modes, failing if RSS, watches, keys or leases grow.
//! `--only TEXT` injects only the faults whose label contains TEXT (after
//! the baseline), e.g. `--only isolated`. `--known-slow TEXT` reports the
//! recovery overruns (checker 4) of the faults whose label contains TEXT as
//! known instead of failing the run: for a liveness problem that is
//! understood and reported, never for a safety checker.
//! `--redis single|sentinel|cluster` runs the Redis fault run on that
//! deployment instead (`redis_faults.rs`; the faults and what Redis
//! promises under each in `redis_fault.rs`): restarts of one instance with
//! and without persistence; a planned failover, the master killed and the
//! master paused behind sentinels and on a cluster, and on a cluster the
//! workers' slot migrated while held. Its checkers are
//! `redis_check.rs`'s (counter, overlaps, tokens never going back) and the
//! recovery and leftover checks below. There the first worker holds the
//! lock `--long-hold-ms` (1.5 x TTL by default) each time, so that its lock
//! must be extended across the fault, which lands while it holds, and a
//! new worker starts (asking the deployment afresh) after each fault
//! while the oldest other one stops. `scripts/faults.sh --redis` runs
//! the three deployments' short form. `--redis sentinel --net` (as root)
//! runs one fault instead, in network namespaces (`redis_cutoff.rs`): the
//! master cut off from the sentinels and its replica, not from its
//! clients, while worker 0 holds the lock. `FAIRLOCK_REPLICA_ACKS`
//! (`all`, `off`, a number) sets the Redis workers' replica
//! acknowledgements (default all); `off` shows what they prevent.
//! `--net` runs the network suite instead (`net_phases.rs`, as root): the
//! members and workers in network namespaces, faults that cut links,
//! partition the cluster, drop packets and delay them.
//! `FAULTS_TRACE=fairlock=debug` (any tracing env filter) makes every
//! worker print the library's tracing to stderr, each line stamped with the
//! worker's number and CLOCK_MONOTONIC in ms, the clock of `--dump`'s events.
//! `--unfenced` makes the workers write the counter with a plain put: the
//! run must then fail (checkers 1 and 2), which shows they can.
//! The workers' request timeout defaults to the TTL, not to the library's
//! 5 s: a request lost in a leader change (a queue check, a lease grant)
//! holds its caller up for a whole request timeout, so a liveness bound
//! stated in terms of the TTL needs a request timeout no longer than it.
//! (Release txns retry after TTL/3 regardless; with
//! `--request-timeout-ms 5000` the short run also passes.)
//! `scripts/faults.sh [--long]` runs it.
//!
//! Checkers (see `check.rs`), each failing the run on a violation:
//! 1. the counter, written only through `fenced_txn`, ends equal to the
//!    number of acknowledged increments (plus indeterminate ones etcd
//!    applied), and its history has no lost or duplicated update;
//! 2. critical sections (CLOCK_MONOTONIC, shared by all processes on this
//!    machine) never overlap, except where the earlier holder was paused
//!    past its TTL, saw the loss and had its next fenced write rejected, or
//!    where etcd ended the earlier holder's lease before the deadline its
//!    acknowledged renewals guaranteed and the holder's later writes were
//!    refused (reported as an ETCD LEASE FAULT, not counted: the revoke
//!    injection does this on purpose, and etcd 3.5 did it on its own
//!    after a paused leader resumed; the lease's end is read from etcd's
//!    history, see `check::etcd_ended_lease`);
//! 3. fair mode grants in queue order (replayed from etcd's history);
//! 4. after each fault heals, a lock is granted again within
//!    TTL + election timeout + margin (the isolated leader: from when the
//!    majority had its new leader, see `Injection::bound`);
//! 5. afterwards no keys or leases are left in etcd.
//!
//! Workers are this binary run with `--worker`; each prints one line per
//! event on stdout (`events.rs`).

mod check;
mod convergence;
mod counter_check;
mod election_check;
mod etcd_sections;
mod events;
mod fault;
mod history;
mod inject;
mod net_check;
mod net_phases;
mod observer;
mod order_check;
#[cfg(feature = "redis")]
mod redis_check;
#[cfg(feature = "redis")]
mod redis_cutoff;
#[cfg(feature = "redis")]
mod redis_deploy;
#[cfg(feature = "redis")]
mod redis_election;
mod redis_fault;
#[cfg(feature = "redis")]
mod redis_faults;
#[cfg(feature = "redis")]
mod redis_net;
#[cfg(feature = "redis")]
mod redis_ns_sentinel;
#[cfg(feature = "redis")]
mod redis_phase_check;
#[cfg(feature = "redis")]
mod redis_sections;
#[cfg(feature = "redis")]
mod redis_worker;
mod retry;
mod run;
mod sections;
mod shared_check;
mod soak;
#[path = "../../tests/support/mod.rs"]
mod support;
mod table;
mod worker;
mod workload;

use std::process::ExitCode;
use std::time::Duration;

/// What the orchestrator was asked to do.
#[derive(Clone, Debug)]
pub struct Opts {
    /// Injections per fault.
    pub rounds: usize,
    /// Worker processes per phase.
    pub workers: usize,
    /// Phases to run: fair, unfair or both.
    pub modes: Vec<bool>,
    /// Session lease TTL of the workers.
    pub ttl: Duration,
    /// How long a holder sleeps in its critical section before writing.
    pub hold: Duration,
    /// Allowed recovery beyond TTL + election timeout.
    pub margin: Duration,
    /// The workers' etcd request timeout; 0 means the TTL.
    pub request_timeout: Duration,
    /// Workers write the counter without the fence: proves the checkers
    /// catch what fencing prevents.
    pub unfenced: bool,
    /// Where to write every event and etcd's history, for a post-mortem.
    pub dump: Option<std::path::PathBuf>,
    /// Run the network suite (`net_phases.rs`) instead of the loopback one.
    pub net: bool,
    /// Inject only the faults whose label contains this.
    pub only: Option<String>,
    /// Recovery bound overruns (checker 4) of faults whose label contains
    /// this are reported as known, not counted as violations.
    pub known_slow: Option<String>,
    /// Run the soak (`soak.rs`) instead of any fault suite.
    pub soak: Option<soak::SoakOpts>,
    /// What the workers do (`workload.rs`).
    pub workload: workload::Workload,
    /// Run the Redis fault run on this deployment instead (`redis_faults.rs`).
    pub redis: Option<redis_fault::Deployment>,
    /// The Redis runs' first worker holds this long (0: `hold`): a holder
    /// whose lock must be extended across the fault.
    pub long_hold: Duration,
}

const USAGE: &str = "usage: faults [--long] [--mode both|fair|unfair] [--workers N] [--rounds N] \
                     [--ttl-ms MS] [--hold-ms MS] [--margin-ms MS] [--request-timeout-ms MS] [--unfenced] [--dump DIR] [--net] [--only TEXT] [--known-slow TEXT] [--workload mutex|shared|election] [--redis single|sentinel|cluster [--long-hold-ms MS]] \
                     [--soak SECS [--soak-keys N] [--soak-tasks N] [--soak-leak]]";

enum Role {
    Orchestrator(Opts),
    Worker(worker::Args),
    Observer(observer::Args),
    #[cfg(feature = "redis")]
    RedisWorker(redis_worker::Args),
    #[cfg(feature = "redis")]
    RedisObserver(redis_election::Args),
}

fn parse() -> Result<Role, String> {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("--worker") {
        return worker::Args::parse(args.skip(1)).map(Role::Worker);
    }
    if args.peek().map(String::as_str) == Some("--observer") {
        return observer::Args::parse(args.skip(1)).map(Role::Observer);
    }
    #[cfg(feature = "redis")]
    if args.peek().map(String::as_str) == Some("--redis-worker") {
        return redis_worker::Args::parse(args.skip(1)).map(Role::RedisWorker);
    }
    #[cfg(feature = "redis")]
    if args.peek().map(String::as_str) == Some("--redis-observer") {
        return redis_election::Args::parse(args.skip(1)).map(Role::RedisObserver);
    }
    let mut o = Opts {
        rounds: 0,
        workers: 4,
        modes: vec![true, false],
        ttl: Duration::from_secs(2),
        hold: Duration::from_millis(40),
        margin: Duration::from_secs(2),
        request_timeout: Duration::ZERO,
        unfenced: false,
        dump: None,
        net: false,
        only: None,
        known_slow: None,
        soak: None,
        workload: workload::Workload::Mutex,
        redis: None,
        long_hold: Duration::ZERO,
    };
    let mut long_hold = None;
    let mut soak = soak::SoakOpts {
        duration: Duration::ZERO,
        keys: 64,
        tasks: 16,
        leak: false,
    };
    let mut long = false;
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        let number = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: {v:?} is not a number"))
        };
        match flag.as_str() {
            "--long" => long = true,
            "--mode" => {
                o.modes = match value()?.as_str() {
                    "both" => vec![true, false],
                    "fair" => vec![true],
                    "unfair" => vec![false],
                    other => return Err(format!("--mode: {other:?} is not both, fair or unfair")),
                }
            }
            "--workers" => o.workers = usize::try_from(number(value()?)?).unwrap_or(0),
            "--rounds" => o.rounds = usize::try_from(number(value()?)?).unwrap_or(0),
            "--ttl-ms" => o.ttl = Duration::from_millis(number(value()?)?),
            "--hold-ms" => o.hold = Duration::from_millis(number(value()?)?),
            "--margin-ms" => o.margin = Duration::from_millis(number(value()?)?),
            "--request-timeout-ms" => {
                o.request_timeout = Duration::from_millis(number(value()?)?);
            }
            "--unfenced" => o.unfenced = true,
            "--dump" => o.dump = Some(value()?.into()),
            "--net" => o.net = true,
            "--only" => o.only = Some(value()?),
            "--known-slow" => o.known_slow = Some(value()?),
            "--workload" => {
                let w = value()?;
                o.workload = workload::Workload::parse(&w).ok_or(format!(
                    "--workload: {w:?} is not mutex, shared or election"
                ))?;
            }
            "--redis" => {
                let d = value()?;
                o.redis = Some(
                    redis_fault::Deployment::parse(&d)
                        .ok_or(format!("--redis: {d:?} is not single, sentinel or cluster"))?,
                );
            }
            "--long-hold-ms" => long_hold = Some(Duration::from_millis(number(value()?)?)),
            "--soak" => soak.duration = Duration::from_secs(number(value()?)?),
            "--soak-keys" => soak.keys = usize::try_from(number(value()?)?).unwrap_or(1).max(1),
            "--soak-tasks" => soak.tasks = usize::try_from(number(value()?)?).unwrap_or(1).max(1),
            "--soak-leak" => soak.leak = true,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if !soak.duration.is_zero() {
        o.soak = Some(soak);
    }
    if o.rounds == 0 {
        o.rounds = if long { 5 } else { 1 };
    }
    o.long_hold = long_hold.unwrap_or(o.ttl * 3 / 2);
    if o.request_timeout.is_zero() {
        o.request_timeout = o.ttl;
    }
    if o.net && o.workload != workload::Workload::Mutex {
        return Err(
            "--workload: the network suite (--net, its etcd and its Redis part) runs the mutex \
             workload only"
                .into(),
        );
    }
    if o.workers < 2 {
        return Err("--workers must be at least 2 (someone must be waiting)".into());
    }
    if o.ttl < Duration::from_secs(2) {
        return Err("--ttl-ms must be at least 2000 (etcd's minimum lease TTL)".into());
    }
    Ok(Role::Orchestrator(o))
}

fn main() -> ExitCode {
    let role = match parse() {
        Ok(role) => role,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("faults: no tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match role {
        Role::Worker(args) => match rt.block_on(worker::run(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("faults worker: {e}");
                ExitCode::FAILURE
            }
        },
        Role::Observer(args) => match rt.block_on(observer::run(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("faults observer: {e}");
                ExitCode::FAILURE
            }
        },
        #[cfg(feature = "redis")]
        Role::RedisWorker(args) => match rt.block_on(redis_worker::run(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("faults redis worker: {e}");
                ExitCode::FAILURE
            }
        },
        #[cfg(feature = "redis")]
        Role::RedisObserver(args) => match rt.block_on(redis_election::run(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("faults redis observer: {e}");
                ExitCode::FAILURE
            }
        },
        Role::Orchestrator(opts) => match rt.block_on(async {
            if let Some(soak) = &opts.soak {
                soak::run(soak).await
            } else if let Some(deployment) = opts.redis {
                run_redis(&opts, deployment).await
            } else if opts.net {
                net_phases::run(&opts).await
            } else {
                run::run(&opts).await
            }
        }) {
            Ok(0) => ExitCode::SUCCESS,
            Ok(violations) => {
                eprintln!("faults: {violations} violation(s)");
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("faults: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

#[cfg(feature = "redis")]
async fn run_redis(o: &Opts, deployment: redis_fault::Deployment) -> Result<usize, BoxError> {
    if o.net && deployment == redis_fault::Deployment::Sentinel {
        return redis_cutoff::run(o).await;
    }
    redis_faults::run(o, deployment).await
}

#[cfg(not(feature = "redis"))]
async fn run_redis(_: &Opts, _: redis_fault::Deployment) -> Result<usize, BoxError> {
    Err("--redis needs the redis feature".into())
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on this
/// machine, so intervals from different workers can be compared.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0; // cannot happen for CLOCK_MONOTONIC on Linux
    }
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Milliseconds, for the report.
pub fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Error type of the harness: any error, as text.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
