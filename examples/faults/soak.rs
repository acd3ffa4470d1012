//! The soak (`--soak SECS`): lock cycles on many keys with both modes at
//! once against one etcd (a new set of keys every 5 s, so that over a run
//! most keys are used for a while and then never again), sampling what a leak would grow: this process's
//! RSS, etcd's open watchers and watch streams, the keys under the soak's
//! prefix, the leases, and etcd's RSS; and cycles/s, reported only.
//!
//! It fails on growth, comparing counts, never speed. Of the samples after
//! a warm-up of 40 s (idle watches close after 30 s), the second half's
//! peak of each count may exceed the first half's by at most a quarter
//! (plus a little: contention moves them), RSS may end at most a quarter or
//! 16 MiB above the first half's peak, and once the tasks stop and the
//! lockers close no key or lease may be left. `--soak-leak` forgets
//! every 50th guard (the lock key and its lease stay): the run must then
//! fail, which shows the checks can.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{Client, GetOptions};
use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Context, Key, Locker};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::BoxError;
use crate::support::Etcd;

/// How long one set of keys is used before the next takes over.
const ROTATE: Duration = Duration::from_secs(5);
/// Growth is judged after this: the locker keeps a watch per key it waited
/// on until it has been idle for 30 s (`own_watch.rs`), so watches and
/// memory climb for that long before old keys' watches start to close.
const WARMUP: Duration = Duration::from_secs(40);

/// What the soak runs.
#[derive(Clone, Debug)]
pub struct SoakOpts {
    pub duration: Duration,
    /// Keys per mode.
    pub keys: usize,
    /// Tasks per mode, each looping lock -> unlock on a random key.
    pub tasks: usize,
    /// Forget every 50th guard (a deliberate leak).
    pub leak: bool,
}

/// One sample.
#[derive(Clone, Debug, Default)]
struct Sample {
    at: Duration,
    cycles_per_s: f64,
    rss_kib: u64,
    watchers: u64,
    watch_streams: u64,
    keys: i64,
    leases: usize,
    etcd_rss_kib: u64,
}

pub async fn run(o: &SoakOpts) -> Result<usize, BoxError> {
    let etcd = tokio::task::block_in_place(Etcd::start);
    let prefix = format!("/fairlock-soak/{}/", uuid::Uuid::new_v4().simple());
    let mut client = etcd.client().await;
    let config = EtcdConfig::new([etcd.endpoint.clone()])
        .with_prefix(prefix.clone())
        .with_ttl(Duration::from_secs(10));
    let fair = Arc::new(EtcdLocker::connect(config.clone(), true).await?);
    let unfair = Arc::new(EtcdLocker::connect(config, false).await?);
    let cycles = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (mode, locker) in [("f", &fair), ("u", &unfair)] {
        for t in 0..o.tasks {
            let (locker, cycles, stop) =
                (Arc::clone(locker), Arc::clone(&cycles), Arc::clone(&stop));
            let (keys, leak) = (o.keys, o.leak);
            let mut rng = (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                let begun = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    // The key set moves on every ROTATE: keys that are
                    // used once and never again, as per-job locks are.
                    let generation = begun.elapsed().as_secs() / ROTATE.as_secs();
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let key = Key::from(format!("{mode}{generation}-{}", rng % keys as u64));
                    // A key held for ever (--soak-leak) holds its waiters up only
                    // until the key set moves on.
                    let ctx = Context::background().with_timeout(ROTATE);
                    let Ok(guard) = locker.lock(&ctx, &key).await else {
                        continue;
                    };
                    n += 1;
                    if leak && n.is_multiple_of(50) {
                        std::mem::forget(guard);
                    } else {
                        let _ = guard.unlock().await;
                    }
                    cycles.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    let interval = (o.duration / 12).max(Duration::from_secs(5));
    println!(
        "soak: {} s, {} keys and {} tasks per mode (fair and unfair at once), TTL 10 s, \
         a sample every {} s{}",
        o.duration.as_secs(),
        o.keys,
        o.tasks,
        interval.as_secs(),
        if o.leak {
            "; LEAKING every 50th guard"
        } else {
            ""
        }
    );
    println!(
        "{:>6} {:>10} {:>9} {:>9} {:>8} {:>6} {:>7} {:>10}",
        "t s", "cycles/s", "RSS KiB", "watchers", "streams", "keys", "leases", "etcd KiB"
    );
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut last = (Instant::now(), 0u64);
    while started.elapsed() < o.duration {
        tokio::time::sleep(interval).await;
        let now = (Instant::now(), cycles.load(Ordering::Relaxed));
        let s = sample(&etcd, &mut client, &prefix, started, now, last).await?;
        last = now;
        println!(
            "{:>6} {:>10.0} {:>9} {:>9} {:>8} {:>6} {:>7} {:>10}",
            s.at.as_secs(),
            s.cycles_per_s,
            s.rss_kib,
            s.watchers,
            s.watch_streams,
            s.keys,
            s.leases,
            s.etcd_rss_kib
        );
        samples.push(s);
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let total = cycles.load(Ordering::Relaxed);
    let fair = Arc::try_unwrap(fair).map_err(|_| "fair locker still shared")?;
    let unfair = Arc::try_unwrap(unfair).map_err(|_| "unfair locker still shared")?;
    let closed = (fair.close().await, unfair.close().await);
    // Revoked leases delete their keys at once; leaked ones are renewed no
    // more and expire within the TTL.
    let (keys, leases) = leftovers(&mut client, &prefix, Duration::from_secs(15)).await?;
    println!(
        "{total} cycles; lockers closed: {closed:?}; left after closing: {keys} keys, {leases} leases"
    );
    let steady: Vec<Sample> = samples.iter().filter(|s| s.at >= WARMUP).cloned().collect();
    let problems = growth(&steady, keys, leases);
    for p in &problems {
        println!("  VIOLATION (soak): {p}");
    }
    Ok(problems.len())
}

/// One count read from a sample.
type Count = fn(&Sample) -> u64;

/// The growth checks (see the module docs).
fn growth(samples: &[Sample], keys: i64, leases: usize) -> Vec<String> {
    let mut out = Vec::new();
    if samples.len() < 4 {
        out.push(format!(
            "only {} samples after the {} s warm-up: run longer",
            samples.len(),
            WARMUP.as_secs()
        ));
        return out;
    }
    let (first, second) = samples.split_at(samples.len() / 2);
    let peak = |half: &[Sample], f: Count| half.iter().map(f).max().unwrap_or(0);
    let counts: [(&str, Count); 4] = [
        ("etcd watchers", |s| s.watchers),
        ("etcd watch streams", |s| s.watch_streams),
        ("keys under the prefix", |s| {
            u64::try_from(s.keys).unwrap_or(0)
        }),
        ("leases", |s| s.leases as u64),
    ];
    for (what, f) in counts {
        let (a, b) = (peak(first, f), peak(second, f));
        if b > a + a / 4 + 4 {
            out.push(format!(
                "{what} grew: peak {a} in the first half, {b} in the second"
            ));
        }
    }
    let start = peak(first, |s| s.rss_kib);
    let end = samples[samples.len() - 1].rss_kib;
    if end > start + (start / 4).max(16 * 1024) {
        out.push(format!("RSS grew from a peak of {start} KiB to {end} KiB"));
    }
    if keys != 0 || leases != 0 {
        out.push(format!("left behind: {keys} keys, {leases} leases"));
    }
    out
}

async fn sample(
    etcd: &Etcd,
    client: &mut Client,
    prefix: &str,
    started: Instant,
    (now, cycles): (Instant, u64),
    (then, before): (Instant, u64),
) -> Result<Sample, BoxError> {
    let metrics = metrics(&etcd.endpoint).await?;
    let gauge = |name: &str| {
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(0.0) as u64
    };
    let keys = client
        .get(
            prefix,
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await?
        .count();
    let leases = client.leases().await?.leases().len();
    Ok(Sample {
        at: now - started,
        cycles_per_s: (cycles - before) as f64 / (now - then).as_secs_f64(),
        rss_kib: rss_kib("self"),
        watchers: gauge("etcd_debugging_mvcc_watcher_total"),
        watch_streams: gauge("etcd_debugging_mvcc_watch_stream_total"),
        keys,
        leases,
        etcd_rss_kib: rss_kib(&etcd.pid().to_string()),
    })
}

/// etcd's Prometheus metrics, fetched with a bare HTTP/1.0 GET.
async fn metrics(endpoint: &str) -> Result<String, BoxError> {
    let mut s = tokio::net::TcpStream::connect(endpoint).await?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await?;
    let mut body = String::new();
    s.read_to_string(&mut body).await?;
    Ok(body)
}

/// VmRSS of `/proc/<pid>`, in KiB (0 if unknown).
fn rss_kib(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Keys under `prefix` and leases, once both are zero or `within` passed.
async fn leftovers(
    client: &mut Client,
    prefix: &str,
    within: Duration,
) -> Result<(i64, usize), BoxError> {
    let deadline = Instant::now() + within;
    loop {
        let keys = client
            .get(
                prefix,
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await?
            .count();
        let leases = client.leases().await?.leases().len();
        if (keys == 0 && leases == 0) || Instant::now() >= deadline {
            return Ok((keys, leases));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
