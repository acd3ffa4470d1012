//! The processes of the scale curves (`scale.rs`): one backend
//! connection and one locker each, driven over stdin and reporting on
//! stdout, one line per answer.
//!
//! ```text
//! bench --scale-child queue|held|idle ENDPOINT PREFIX N
//! ```
//! - `queue`: N tasks, each locking and unlocking key `q` in a loop (a
//!   closed loop: the queue stays N long);
//! - `held`: takes keys `k0` .. `kN-1` at once and holds them;
//! - `idle`: one session (its lease renewed), nothing held.
//!
//! It prints `BASE <rss bytes>` once connected (before any task); held
//! also `TOOK <seconds>` once every key is held. On stdin,
//! `count` answers `COUNT <grants so far>`, `release` (held) answers
//! `RELEASED <seconds>`; at end of input it closes its locker (the lease
//! is revoked: nothing stays behind) and exits.

use std::io::BufRead;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fairlock::etcd::EtcdLocker;
use fairlock::{BackendConfig, Context, Key, LockGuard, Locker};
use tokio::task::JoinSet;

use crate::workloads::Res;

/// How many calls the curves keep in flight: a child's takes and
/// releases, and the floors' plain writes ([`in_flight`]).
pub const IN_FLIGHT: usize = 256;

/// The TTL of every curve's sessions: long enough that queueing ten
/// thousand waiters on two cores never outlasts a renewal.
pub const TTL: Duration = Duration::from_secs(30);

/// The configuration of every locker of the curves. On Redis without the
/// data-loss wait: the server is the bench's own, just started, so there
/// is no lock it could have forgotten (with it, the first grants wait a
/// TTL and a `try_lock` finds the key busy).
pub fn config(endpoint: &str, prefix: &str) -> Res<BackendConfig> {
    let config = BackendConfig::from_endpoints([endpoint])?
        .with_prefix(prefix)
        .with_ttl(TTL);
    Ok(match config {
        BackendConfig::Redis(c) => BackendConfig::Redis(c.with_data_loss_wait(Duration::ZERO)),
        other => other,
    })
}

/// Runs one child of the scale curves until its stdin ends.
pub async fn run(mode: &str, endpoint: &str, prefix: &str, n: usize) -> Res<()> {
    let config = config(endpoint, prefix)?;
    // On etcd, the locker itself: `close` revokes its lease at the end.
    let etcd = match &config {
        BackendConfig::Etcd(c) => Some(EtcdLocker::connect(c.clone(), true).await?),
        _ => None,
    };
    let locker: Arc<dyn Locker> = match &etcd {
        Some(etcd) => Arc::new(etcd.clone()),
        None => config.connect(true).await?,
    };
    // The session exists (etcd: its lease is granted) before the base.
    let warm = Key::from(format!("warm-{}", std::process::id()));
    locker
        .lock(&Context::background(), &warm)
        .await?
        .unlock()
        .await?;
    println!("BASE {:.0}", rss_bytes(std::process::id()));
    let (lines, mut input) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let grants = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    let mut held = Vec::new();
    match mode {
        "queue" => {
            for _ in 0..n {
                let (locker, grants) = (Arc::clone(&locker), Arc::clone(&grants));
                tasks.spawn(async move { cycle_forever(locker, grants).await });
            }
        }
        "held" => {
            let t = Instant::now();
            held = take_all(&locker, n).await?;
            println!("TOOK {:.3}", t.elapsed().as_secs_f64());
        }
        "idle" => {}
        other => return Err(format!("--scale-child {other:?}: use queue, held or idle").into()),
    }
    loop {
        tokio::select! {
            line = input.recv() => match line.as_deref() {
                Some("count") => println!("COUNT {}", grants.load(Ordering::Relaxed)),
                Some("release") => {
                    let t = Instant::now();
                    release_all(std::mem::take(&mut held)).await?;
                    println!("RELEASED {:.3}", t.elapsed().as_secs_f64());
                }
                Some(other) => return Err(format!("unknown command {other:?}").into()),
                None => break,
            },
            Some(done) = tasks.join_next() => {
                return Err(format!("a waiter ended: {:?}", done?.err()).into());
            }
        }
    }
    tasks.abort_all();
    std::mem::forget(held); // the close below revokes the lease they are on
    // Revoking a lease with many keys can outlast a request timeout: the
    // keys go with the lease either way.
    if let Some(etcd) = etcd {
        let _ = etcd.close().await;
    }
    Ok(())
}

/// Locks and unlocks key `q` until aborted, counting grants.
async fn cycle_forever(locker: Arc<dyn Locker>, grants: Arc<AtomicU64>) -> fairlock::Result<()> {
    let key = Key::from("q");
    loop {
        let guard = locker.lock(&Context::background(), &key).await?;
        grants.fetch_add(1, Ordering::Relaxed);
        guard.unlock().await?;
    }
}

/// Takes keys `k0` .. `kN-1`, [`IN_FLIGHT`] calls at a time.
async fn take_all(locker: &Arc<dyn Locker>, n: usize) -> Res<Vec<LockGuard>> {
    let tries = (0..n).map(|i| {
        let locker = Arc::clone(locker);
        async move { locker.try_lock(&Key::from(format!("k{i}"))).await }
    });
    let taken = in_flight(tries).await?;
    taken
        .into_iter()
        .map(|g| g.ok_or_else(|| "key busy".into()))
        .collect()
}

/// Unlocks every guard, [`IN_FLIGHT`] at a time.
async fn release_all(guards: Vec<LockGuard>) -> Res<()> {
    in_flight(guards.into_iter().map(LockGuard::unlock)).await?;
    Ok(())
}

/// Runs `calls`, [`IN_FLIGHT`] at a time, each a task of its own; their
/// answers in the order they came, or the first error.
pub async fn in_flight<T, E, F>(calls: impl IntoIterator<Item = F>) -> Res<Vec<T>>
where
    F: Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    let mut set: JoinSet<Result<T, E>> = JoinSet::new();
    let mut answers = Vec::new();
    for call in calls {
        if set.len() >= IN_FLIGHT {
            answers.push(
                set.join_next()
                    .await
                    .expect("a call")?
                    .map_err(Into::into)?,
            );
        }
        set.spawn(call);
    }
    while let Some(done) = set.join_next().await {
        answers.push(done?.map_err(Into::into)?);
    }
    Ok(answers)
}

/// The resident memory of process `pid`, in bytes (0 if unknown).
pub fn rss_bytes(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb * 1024.0)
}
