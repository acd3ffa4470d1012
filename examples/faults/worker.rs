//! A worker process: lock -> critical section -> unlock, until its stdin
//! closes. The critical section sleeps `hold` (where a SIGSTOP from the
//! orchestrator usually lands), checks `is_held()`, reads the counter and
//! writes counter+1 through `fenced_txn`. Every step is an event line.

use std::io::BufRead;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use fairlock::etcd::{EtcdConfig, EtcdLocker, FencedTxn};
use fairlock::{CancellationToken, Context, Error, Key, LockGuard, Locker};

use crate::BoxError;
use crate::events::{Ev, Kind};
use crate::support::chain;
use crate::support::proxy::Proxy;
use crate::workload::Workload;

/// The lock every worker of a phase contends for.
pub const LOCK_KEY: &str = "k";

/// How long one `lock` call may wait before the worker tries again; long
/// enough to outlast any fault here, short enough to notice a stuck call.
const LOCK_TIMEOUT: Duration = Duration::from_secs(20);

pub struct Args {
    /// Process number, unique in the run: names its writes in the counter.
    pub id: u64,
    pub endpoints: Vec<String>,
    /// Lock prefix (the lock key is `<prefix>k`).
    pub prefix: String,
    /// The counter's key.
    pub counter: String,
    pub fair: bool,
    pub ttl: Duration,
    pub hold: Duration,
    pub request_timeout: Duration,
    pub unfenced: bool,
    /// Reach every endpoint through a delay relay of our own, whose delay
    /// the orchestrator sets with `delay <ms> <jitter ms>` lines on stdin.
    pub proxied: bool,
    /// What the worker does with its locker (`workload.rs`).
    pub workload: Workload,
}

impl Args {
    pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut next = |what: &str| args.next().ok_or(format!("--worker: missing {what}"));
        let id = next("id")?.parse().map_err(|_| "--worker: bad id")?;
        let endpoints = next("endpoints")?.split(',').map(String::from).collect();
        let prefix = next("prefix")?;
        let counter = next("counter")?;
        let fair = next("mode")? == "fair";
        let ms = |v: String| v.parse::<u64>().map(Duration::from_millis);
        let ttl = ms(next("ttl")?).map_err(|_| "--worker: bad ttl")?;
        let hold = ms(next("hold")?).map_err(|_| "--worker: bad hold")?;
        let request_timeout =
            ms(next("request timeout")?).map_err(|_| "--worker: bad request timeout")?;
        let unfenced = next("fencing")? == "unfenced";
        let proxied = next("path")? == "proxied";
        // Absent for the network suite's workers: the mutex.
        let workload = match args.next() {
            Some(w) => Workload::parse(&w).ok_or("--worker: bad workload")?,
            None => Workload::Mutex,
        };
        Ok(Args {
            id,
            endpoints,
            prefix,
            counter,
            fair,
            ttl,
            hold,
            request_timeout,
            unfenced,
            proxied,
            workload,
        })
    }

    /// The arguments that make the orchestrator's child a worker.
    pub fn to_argv(
        id: usize,
        endpoints: &[String],
        prefix: &str,
        counter: &str,
        fair: bool,
        proxied: bool,
        o: &crate::Opts,
    ) -> Vec<String> {
        vec![
            "--worker".into(),
            id.to_string(),
            endpoints.join(","),
            prefix.into(),
            counter.into(),
            if fair { "fair" } else { "unfair" }.into(),
            o.ttl.as_millis().to_string(),
            o.hold.as_millis().to_string(),
            o.request_timeout.as_millis().to_string(),
            if o.unfenced { "unfenced" } else { "fenced" }.into(),
            if proxied { "proxied" } else { "direct" }.into(),
            o.workload.name().into(),
        ]
    }
}

/// With `FAULTS_TRACE` set (an env filter such as `fairlock=debug`), the
/// library's tracing goes to stderr, each line stamped with this worker's
/// number and CLOCK_MONOTONIC in ms (the clock of the events and the
/// injections), so a dump can be read against it.
fn trace(id: u64) {
    struct Stamp(u64);
    impl tracing_subscriber::fmt::time::FormatTime for Stamp {
        fn format_time(
            &self,
            w: &mut tracing_subscriber::fmt::format::Writer<'_>,
        ) -> std::fmt::Result {
            write!(w, "p{} {:.1}", self.0, crate::mono_ns() as f64 / 1e6)
        }
    }
    let Ok(filter) = std::env::var("FAULTS_TRACE") else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_timer(Stamp(id))
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .try_init();
}

pub async fn run(a: Args) -> Result<(), BoxError> {
    trace(a.id);
    let mut proxies = Vec::new();
    let mut endpoints = a.endpoints.clone();
    if a.proxied {
        for e in &mut endpoints {
            let p = Proxy::start(([127, 0, 0, 1], 0).into(), e.clone()).await?;
            *e = p.addr.to_string();
            proxies.push(p);
        }
    }
    let delays: Vec<_> = proxies.iter().map(Proxy::delay).collect();
    let config = EtcdConfig::new(endpoints)
        .with_prefix(a.prefix.clone())
        .with_ttl(a.ttl)
        .with_request_timeout(a.request_timeout);
    // A worker restarted during a fault may find etcd slow to answer.
    let mut tries = 0;
    let locker = loop {
        match EtcdLocker::connect(config.clone(), a.fair).await {
            Ok(l) => break l,
            Err(e) if tries < 10 => {
                tries += 1;
                Ev::new(Kind::Err, 0, 0, format!("connect: {e}")).emit();
            }
            Err(e) => return Err(e.into()),
        }
    };
    let lock_key = format!("{}{LOCK_KEY}", a.prefix);
    Ev::new(Kind::Start, 0, 0, std::process::id().to_string()).emit();

    // The orchestrator stops us by closing our stdin (or by exiting), and
    // sets our relays' delay with `delay <ms> <jitter ms>` lines.
    let stop = CancellationToken::new();
    let on_eof = stop.clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            let f: Vec<u64> = line
                .strip_prefix("delay ")
                .unwrap_or_default()
                .split(' ')
                .filter_map(|n| n.parse().ok())
                .collect();
            if let [base, jitter] = f[..] {
                for d in &delays {
                    d.set(Duration::from_millis(base), Duration::from_millis(jitter));
                }
            }
        }
        on_eof.cancel();
    });

    let mut seq = 0;
    let mut witnessed = 0;
    let key = Key::from(LOCK_KEY);
    while !stop.is_cancelled() {
        if a.workload != Workload::Mutex {
            let res = crate::etcd_sections::EtcdResource {
                a: &a,
                locker: &locker,
            };
            crate::sections::one(&res.cycle(), &locker, &res, &stop, &mut seq).await;
            continue;
        }
        let ctx = Context::background().with_timeout(LOCK_TIMEOUT);
        let guard = tokio::select! {
            res = locker.lock(&ctx, &key) => res,
            () = stop.cancelled() => break,
        };
        let guard = match guard {
            Ok(g) => g,
            Err(e) => {
                Ev::new(Kind::LockErr, 0, 0, chain(&e)).emit();
                // Pace retries while etcd is unavailable.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        cycle(&a, &locker, &lock_key, guard, &mut seq, &mut witnessed).await;
    }
    let closed = locker.close().await;
    Ev::new(Kind::Bye, 0, 0, format!("{closed:?}")).emit();
    Ok(())
}

/// One critical section and unlock.
async fn cycle(
    a: &Args,
    locker: &EtcdLocker,
    lock_key: &str,
    guard: LockGuard,
    seq: &mut u64,
    witnessed: &mut i64,
) {
    let token = guard.fencing_token();
    // The lease's local deadline (CLOCK_MONOTONIC ns, 0 if none) and id:
    // the checker tells a lease etcd ended before that deadline (an etcd
    // fault, see `check::etcd_ended_lease`) from anything else. The event
    // is stamped before asking the session for the id (which may wait).
    let mut acq = Ev::new(Kind::Acq, token, 0, "");
    let until = guard.valid_until().map_or(0, |d| {
        let left = d.saturating_duration_since(std::time::Instant::now());
        crate::mono_ns() + u64::try_from(left.as_nanos()).unwrap_or(u64::MAX / 2)
    });
    let lease = locker.session_lease().await.unwrap_or(0);
    if lease != 0 && lease != *witnessed {
        // Before the grant is reported, so before any injection can
        // target it.
        witness(a, locker, lease).await;
        *witnessed = lease;
    }
    acq.detail = format!("until={until} lease={lease:x}");
    acq.emit();
    let lost = guard.lost_token();
    let watcher = tokio::spawn(async move {
        lost.cancelled().await;
        Ev::new(Kind::Lost, token, 0, "").emit();
    });

    tokio::time::sleep(a.hold).await;
    let held = guard.is_held();
    Ev::new(Kind::Held, token, 0, if held { "1" } else { "0" }).emit();

    // Deliberately written even when `is_held()` said no: the checker wants
    // to see that such a write is refused.
    let mut kv = locker.client().kv_client();
    let read = tokio::time::timeout(a.request_timeout, kv.get(a.counter.as_str(), None)).await;
    let current = match read {
        Ok(Ok(resp)) => resp
            .kvs()
            .first()
            .and_then(|kv| kv.value_str().ok())
            .and_then(|v| v.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0),
        Ok(Err(e)) => {
            let why = format!("counter read: {e}");
            return finish(guard, watcher, token, &why, "").await;
        }
        Err(_) => return finish(guard, watcher, token, "counter read: no answer", "").await,
    };
    let next = current + 1;

    *seq += 1;
    let value = format!("{next} {} {seq}", a.id);
    Ev::new(Kind::WriteStart, token, *seq, next.to_string()).emit();
    let write = Txn::new().and_then([TxnOp::put(a.counter.as_str(), value, None)]);
    let result = if a.unfenced {
        let plain = tokio::time::timeout(a.request_timeout, kv.txn(write)).await;
        match plain {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) => Err(Error::Backend {
                backend: "etcd",
                op: "unfenced put",
                source: Box::new(e),
            }),
            Err(_) => Err(Error::Backend {
                backend: "etcd",
                op: "unfenced put",
                source: "no answer".into(),
            }),
        }
    } else {
        guard.fenced_txn(write).await
    };
    let (outcome, lost_now) = match result {
        Ok(_) => ("ok".to_string(), false),
        Err(Error::LockLost { .. }) => ("lost".to_string(), true),
        Err(e) => (format!("err {}", chain(&e)), false),
    };
    Ev::new(Kind::Write, token, *seq, outcome).emit();

    let mut ended = "";
    if (lost_now || !held) && !a.unfenced {
        // The library may refuse locally (past the lease's deadline) without
        // asking etcd. Send the same write guarded by nothing but etcd's
        // compare of the lock key's revision with our token.
        *seq += 1;
        let value = format!("{next} {} {seq}", a.id);
        Ev::new(Kind::ProbeStart, token, *seq, next.to_string()).emit();
        let probe = Txn::new()
            .when([Compare::mod_revision(
                lock_key,
                CompareOp::Equal,
                i64::try_from(token).unwrap_or(i64::MAX),
            )])
            .and_then([TxnOp::put(a.counter.as_str(), value, None)]);
        let outcome = match tokio::time::timeout(a.request_timeout, kv.txn(probe)).await {
            Ok(Ok(resp)) if resp.succeeded() => "ok".to_string(),
            Ok(Ok(_)) => "rejected".to_string(),
            Ok(Err(e)) => format!("err {e}"),
            Err(_) => "err no answer".to_string(),
        };
        Ev::new(Kind::Probe, token, *seq, outcome).emit();
        ended = lease_state(a, locker, lease).await;
    }
    finish(guard, watcher, token, "", ended).await;
}

/// The key on lease `id` that tells, in etcd's history, when the lease
/// ended: etcd deletes every key of a lease in one revision when the lease
/// is revoked or expires, so a lock key deleted in the same revision as
/// its lease's witness went with its lease, and one deleted alone was
/// deleted by a request (`check::etcd_ended_lease`). Best effort: a lease
/// without a witness never excuses an overlap.
pub fn witness_key(counter: &str, id: i64) -> String {
    format!("{}{id:x}", witness_prefix(counter))
}

/// Where the witness keys are: beside the counter, outside the lock prefix.
pub fn witness_prefix(counter: &str) -> String {
    format!("{counter}/lease/")
}

async fn witness(a: &Args, locker: &EtcdLocker, id: i64) {
    let mut kv = locker.client().kv_client();
    let put = kv.put(
        witness_key(&a.counter, id),
        a.id.to_string(),
        Some(etcd_client::PutOptions::new().with_lease(id)),
    );
    if let Ok(Err(e)) | Err(e) = tokio::time::timeout(a.request_timeout, put)
        .await
        .map_err(|_| "no answer".to_string())
        .map(|r| r.map_err(|e| e.to_string()))
    {
        Ev::new(Kind::Err, 0, 0, format!("lease witness: {e}")).emit();
    }
}

/// Whether etcd answered that it does not know the lease asked about
/// (NOT_FOUND).
pub fn lease_not_found(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.code() == tonic::Code::NotFound)
}

/// After a loss: `lease=gone` if etcd no longer knows lease `id`,
/// `lease=alive` if it does, `lease=?` if it did not answer.
pub async fn lease_state(a: &Args, locker: &EtcdLocker, id: i64) -> &'static str {
    let mut client = locker.client().clone();
    let asked = tokio::time::timeout(a.request_timeout, client.lease_time_to_live(id, None)).await;
    match asked {
        // etcd answers an expired or revoked lease with TTL -1.
        Ok(Ok(answer)) if answer.ttl() >= 0 => "lease=alive",
        Ok(Ok(_)) => "lease=gone",
        Ok(Err(e)) if lease_not_found(&e) => "lease=gone",
        _ => "lease=?",
    }
}

/// Ends the critical section: `Rel` (with what became of the lease after a
/// loss, and why, if it ended early), unlock.
async fn finish(
    guard: LockGuard,
    watcher: tokio::task::JoinHandle<()>,
    token: u64,
    why: &str,
    lease: &str,
) {
    if !why.is_empty() {
        Ev::new(Kind::Err, token, 0, why).emit();
    }
    Ev::new(Kind::Rel, token, 0, lease).emit();
    // The loss watcher runs until unlock returns: a holder cut off from
    // etcd may end its section on a request timeout and be told of the
    // loss while its unlock still tries.
    let outcome = match guard.unlock().await {
        Ok(()) => "ok".to_string(),
        Err(Error::LockLost { .. }) => "lost".to_string(),
        Err(e) => format!("err {}", chain(&e)),
    };
    watcher.abort();
    Ev::new(Kind::Unl, token, 0, outcome).emit();
}
